// torchfarm-bench-grpc: a closed-loop load generator for any Open Inference Protocol (KServe v2)
// gRPC endpoint: a farm's grpc_endpoint or torchfarm-bench-grpc-echo, so docs/benchmarks.md
// compares the two with the same client. Each step keeps `concurrency` ModelInfer calls in flight
// on one channel (gRPC's callback API: a finished call starts the next), discards a warm-up, then
// counts the calls that finish inside the window: latency percentiles (p50 at concurrency 1) and
// calls per second (throughput at concurrency 64). Inputs travel as raw_input_contents.
//
//   torchfarm-bench-grpc --target 127.0.0.1:8001 --model identity --shape 1,256
//       --concurrency 1,64 --seconds 5 --json
// The JSON report has the shape of `torchfarm bench --json`: {"target", "model", "shape",
// "datatype", "steps": [{"concurrency", "window_s", "sent", "ok", "requests_per_s", "ok_per_s",
// "latency_us": {count, min, mean, p50, p90, p99, p999, max}, "errors": {code: n},
// "error_count"}]}.
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "proto/grpc_service.grpc.pb.h"
#include "tools/load_generator.h"

namespace torchfarm {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct StepReport {
  int concurrency = 0;
  int64_t sent = 0;
  double window_s = 0;
  std::vector<int64_t> ok_nanos;
  std::map<std::string, int64_t> errors;
};

// One step: `concurrency` calls in flight until the window ends, then the stragglers drain.
class ClosedLoop {
 public:
  ClosedLoop(inference::GRPCInferenceService::Stub* stub,
             const inference::ModelInferRequest* request, int concurrency, double warmup_s,
             double seconds)
      : stub_(stub), request_(request), concurrency_(concurrency) {
    const auto now = Clock::now();
    window_start_ =
        now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warmup_s));
    window_end_ = window_start_ + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(seconds));
  }

  StepReport Run() {
    in_flight_ = concurrency_;
    for (int i = 0; i < concurrency_; ++i) Issue();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return in_flight_ == 0; });
    report_.concurrency = concurrency_;
    report_.window_s = std::chrono::duration<double>(window_end_ - window_start_).count();
    return std::move(report_);
  }

 private:
  struct Call {
    grpc::ClientContext context;
    inference::ModelInferResponse response;
    Clock::time_point start = Clock::now();
  };

  void Issue() {
    auto* call = new Call;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++report_.sent;
    }
    stub_->async()->ModelInfer(&call->context, request_, &call->response,
                               [this, call](grpc::Status status) { OnDone(call, status); });
  }

  void OnDone(Call* call, const grpc::Status& status) {
    const auto end = Clock::now();
    const bool counted = call->start >= window_start_ && end <= window_end_;
    const int64_t nanos =
        std::chrono::duration_cast<std::chrono::nanoseconds>(end - call->start).count();
    delete call;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (counted && status.ok()) report_.ok_nanos.push_back(nanos);
      if (counted && !status.ok()) ++report_.errors[std::to_string(status.error_code())];
      if (end >= window_end_) {
        if (--in_flight_ == 0) done_.notify_all();
        return;
      }
    }
    Issue();
  }

  inference::GRPCInferenceService::Stub* const stub_;
  const inference::ModelInferRequest* const request_;
  const int concurrency_;
  Clock::time_point window_start_, window_end_;
  std::mutex mutex_;
  std::condition_variable done_;
  int in_flight_ = 0;
  StepReport report_;
};

json Round(double value) {
  return std::isfinite(value) ? json(std::round(value * 10) / 10) : json(nullptr);
}

json StepJson(StepReport& step) {
  const int64_t ok = static_cast<int64_t>(step.ok_nanos.size());
  int64_t error_count = 0;
  for (const auto& [code, n] : step.errors) error_count += n;
  const LatencySummary l = Summarize(&step.ok_nanos);
  return {{"concurrency", step.concurrency},
          {"window_s", step.window_s},
          {"sent", step.sent},
          {"ok", ok},
          {"requests_per_s", Round((ok + error_count) / step.window_s)},
          {"ok_per_s", Round(ok / step.window_s)},
          {"latency_us",
           {{"count", l.count},
            {"min", Round(l.min_us)},
            {"mean", Round(l.mean_us)},
            {"p50", Round(l.p50_us)},
            {"p90", Round(l.p90_us)},
            {"p99", Round(l.p99_us)},
            {"p999", Round(l.p999_us)},
            {"max", Round(l.max_us)}}},
          {"errors", step.errors},
          {"error_count", error_count}};
}

// FP32 -> float32 etc., for the input's byte count.
size_t ItemSize(const std::string& datatype) {
  static const std::map<std::string, size_t> kSizes = {
      {"FP32", 4},  {"FP64", 8},  {"FP16", 2}, {"BF16", 2},  {"INT64", 8},
      {"INT32", 4}, {"INT16", 2}, {"INT8", 1}, {"UINT8", 1}, {"BOOL", 1}};
  auto it = kSizes.find(datatype);
  return it == kSizes.end() ? 0 : it->second;
}

}  // namespace
}  // namespace torchfarm

int main(int argc, char** argv) {
  using namespace torchfarm;
  CLI::App app{"Closed-loop ModelInfer load against a KServe v2 gRPC endpoint"};
  std::string target = "127.0.0.1:8001", model = "identity", input_name = "INPUT__0";
  std::string datatype = "FP32";
  std::vector<int64_t> shape = {1, 256};
  std::vector<int> concurrency = {1, 64};
  double seconds = 5, warmup = 1;
  bool as_json = false;
  app.add_option("--target", target, "HOST:PORT of the gRPC endpoint");
  app.add_option("--model", model, "model_name of every call");
  app.add_option("--input-name", input_name, "name of the one input");
  app.add_option("--datatype", datatype, "v2 datatype of the input (FP32, INT64, ...)");
  app.add_option("--shape", shape, "input shape, comma separated")->delimiter(',');
  app.add_option("--concurrency", concurrency, "calls in flight, one step each")->delimiter(',');
  app.add_option("--seconds", seconds, "measured window per step");
  app.add_option("--warmup", warmup, "seconds discarded before each window");
  app.add_flag("--json", as_json, "print one JSON report instead of a table");
  CLI11_PARSE(app, argc, argv);

  const size_t item = ItemSize(datatype);
  int64_t elements = 1;
  for (int64_t dim : shape) elements *= dim;
  if (item == 0 || elements < 0) {
    std::cerr << "error: --datatype '" << datatype << "' / --shape: expected a numeric v2 "
              << "datatype and non-negative dims\n";
    return 2;
  }
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* input = request.add_inputs();
  input->set_name(input_name);
  input->set_datatype(datatype);
  for (int64_t dim : shape) input->add_shape(dim);
  std::string bytes(static_cast<size_t>(elements) * item, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 7) % 61);
  request.add_raw_input_contents(std::move(bytes));

  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), arguments);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    std::cerr << "error: --target " << target << ": no gRPC server answered within 10 s\n";
    return 1;
  }
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  json report = {{"target", target},
                 {"model", model},
                 {"shape", shape},
                 {"datatype", datatype},
                 {"steps", json::array()}};
  for (int c : concurrency) {
    StepReport step = ClosedLoop(stub.get(), &request, std::max(c, 1), warmup, seconds).Run();
    report["steps"].push_back(StepJson(step));
    if (!as_json) {
      const json& s = report["steps"].back();
      std::cout << "concurrency " << c << ": " << s["ok_per_s"] << " ok/s, p50 "
                << s["latency_us"]["p50"] << " us, p99 " << s["latency_us"]["p99"] << " us, "
                << s["error_count"] << " errors\n";
    }
  }
  if (as_json) std::cout << report.dump(2) << std::endl;
  return 0;
}
