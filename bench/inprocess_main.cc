// torchfarm-bench-inprocess: the in-process baseline the farm is measured against. One process,
// one thread calling forward() in a loop (LibTorch's intra-op pool does the parallel work), the
// same TorchScript file and the same InferenceMode the worker uses, no IPC at all.
//
// Owns: the loaded module, a few random input batches per batch size (cycled, so the loop is not
// served from a single hot buffer), and the per-forward latencies. Runs on its main thread, which
// is also the thread whose intra-op count is set (as the worker does on its compute thread).
//
//   torchfarm-bench-inprocess --model FILE --shape 1,3,32,32 [--batch 1,8,32] [--threads 2]
//                             [--seconds 2] [--warmup 0.5] [--dtype float32]
//                             [--device cpu|cuda:N] [--precision fp32|fp16|bf16]
//                             [--cudnn-benchmark]
//
// On a GPU the module and the input batches live on the device before the clock starts (so a
// forward's time excludes the host -> device copy), floating-point parameters, buffers and inputs
// are cast to --precision, and every forward is followed by a device synchronize: the latency is
// the forward's, and forwards do not overlap. The module must not be frozen on another device
// (tools/export_torchvision.py --no-freeze): freezing turns weights into graph constants that
// Module::to() does not move.
//
// Prints one JSON object: per batch size rows/s, forwards/s and forward latency percentiles, the
// best rows/s, the device and precision, the process's RSS (VmRSS, VmHWM) and the LibTorch
// version.
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "worker/torch_compat.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kDistinctInputs = 8;
constexpr int kMinForwards = 3;

// kB value of a /proc/self/status line such as "VmRSS:", or -1.
int64_t StatusKib(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size()));
  }
  return -1;
}

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

std::vector<int64_t> ParseShape(const std::string& text) {
  std::vector<int64_t> shape;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) shape.push_back(std::stoll(part));
  return shape;
}

torch::Tensor RandomInput(std::vector<int64_t> shape, int64_t batch, torch::ScalarType type,
                          const torch::Device& device) {
  shape[0] = batch;
  return (torch::rand(shape) * 2 - 1).to(device, type);
}

// Moves the module to `device` and casts its floating-point state as the worker does.
void PlaceModule(torch::jit::Module& module, const torch::Device& device, torch::ScalarType type) {
  module.to(device);
  if (type != torch::kFloat) torchfarm::worker::CastFloatingState(module, type);
}

// Waits for the device's queued work, so the clock reads completed forwards (no-op on the CPU).
void Synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// Runs forward() on batches of `batch` rows for `seconds` (at least kMinForwards times).
json Measure(torch::jit::Module& module, const std::vector<int64_t>& shape, torch::ScalarType type,
             const torch::Device& device, int64_t batch, double warmup, double seconds) {
  std::vector<torch::Tensor> inputs;
  for (int i = 0; i < kDistinctInputs; ++i) {
    inputs.push_back(RandomInput(shape, batch, type, device));
  }
  Synchronize(device);
  c10::InferenceMode guard;
  auto run_for = [&](double duration, std::vector<double>* latencies_us) {
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(duration));
    int64_t n = 0;
    while (Clock::now() < end || (latencies_us && n < kMinForwards)) {
      const auto t0 = Clock::now();
      torch::IValue out = module.forward({inputs[n % kDistinctInputs]});
      Synchronize(device);
      const auto t1 = Clock::now();
      if (latencies_us)
        latencies_us->push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      ++n;
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  run_for(warmup, nullptr);
  std::vector<double> latencies;
  const double elapsed = run_for(seconds, &latencies);
  const double forwards = static_cast<double>(latencies.size());
  return {
      {"batch", batch},
      {"forwards", latencies.size()},
      {"seconds", elapsed},
      {"forwards_per_s", forwards / elapsed},
      {"rows_per_s", forwards * static_cast<double>(batch) / elapsed},
      {"latency_us",
       {{"p50", Percentile(latencies, 0.5)},
        {"p99", Percentile(latencies, 0.99)},
        {"mean",
         forwards > 0 ? std::accumulate(latencies.begin(), latencies.end(), 0.0) / forwards : 0}}}};
}

// What the command line asks for.
struct Options {
  std::string model_path, shape_text, dtype = "float32", device = "cpu", precision = "fp32";
  std::vector<int64_t> batches = {1};
  int threads = 1;
  double seconds = 2, warmup = 0.5;
  bool cudnn_benchmark = false;
};

// Loads the module, places it, measures every batch size; the JSON report.
json Run(const Options& o, const torch::Device& device) {
  at::globalContext().setBenchmarkCuDNN(o.cudnn_benchmark);
  const torch::ScalarType type =
      o.precision != "fp32" ? *torchfarm::worker::PrecisionType(o.precision)
                            : (o.dtype == "float64" ? torch::kFloat64 : torch::kFloat32);
  const int64_t rss_before_load = StatusKib("VmRSS:");
  torch::jit::Module module = torch::jit::load(o.model_path);
  module.eval();
  PlaceModule(module, device, *torchfarm::worker::PrecisionType(o.precision));
  json results = json::array();
  json best;
  for (int64_t batch : o.batches) {
    json r = Measure(module, ParseShape(o.shape_text), type, device, batch, o.warmup, o.seconds);
    if (best.is_null() || r["rows_per_s"].get<double>() > best["rows_per_s"].get<double>())
      best = r;
    results.push_back(std::move(r));
  }
  return {{"model", o.model_path},
          {"shape", o.shape_text},
          {"threads", o.threads},
          {"device", device.str()},
          {"precision", o.precision},
          {"cudnn_benchmark", o.cudnn_benchmark},
          {"torch_version", TORCH_VERSION},
          {"results", results},
          {"best", best},
          {"rss_kib_before_load", rss_before_load},
          {"rss_kib", StatusKib("VmRSS:")},
          {"hwm_kib", StatusKib("VmHWM:")}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "torchfarm-bench-inprocess: forward() in a loop, the baseline of the farm benchmarks"};
  Options o;
  app.add_option("--model", o.model_path, "TorchScript file")->required()->check(CLI::ExistingFile);
  app.add_option("--shape", o.shape_text, "Input shape; dim 0 is replaced by each batch size")
      ->required();
  app.add_option("--batch", o.batches, "Batch sizes to measure")->delimiter(',');
  app.add_option("--threads", o.threads, "Intra-op threads")->check(CLI::PositiveNumber);
  app.add_option("--seconds", o.seconds, "Measured seconds per batch size");
  app.add_option("--warmup", o.warmup, "Unmeasured seconds per batch size");
  app.add_option("--dtype", o.dtype, "float32 or float64 (inputs, when --precision is fp32)")
      ->check(CLI::IsMember({"float32", "float64"}));
  app.add_option("--device", o.device, "cpu or cuda:N")->capture_default_str();
  app.add_option("--precision", o.precision, "Cast parameters and inputs: fp32, fp16 or bf16")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->capture_default_str();
  app.add_flag("--cudnn-benchmark", o.cudnn_benchmark, "Let cuDNN time its algorithms per shape");
  CLI11_PARSE(app, argc, argv);

  at::set_num_interop_threads(1);
  at::set_num_threads(o.threads);
  try {
    const torch::Device device(o.device);
    if (device.is_cuda() && !torch::cuda::is_available()) {
      std::cerr << "torchfarm-bench-inprocess: " << o.device
                << " requested, but this LibTorch has no CUDA or sees no device\n";
      return 1;
    }
    if (device.is_cuda() && device.index() >= static_cast<int>(torch::cuda::device_count())) {
      std::cerr << "torchfarm-bench-inprocess: no " << o.device << "\n";
      return 1;
    }
    std::cout << Run(o, device).dump(2) << std::endl;
  } catch (const c10::Error& e) {  // a bad device name, model file or precision for the device
    std::cerr << "torchfarm-bench-inprocess: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "torchfarm-bench-inprocess: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
