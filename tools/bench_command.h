// `torchfarm bench`: a load generator for a running farm, and the trivial echo target that proves
// the generator is not what limits it.
//
// Owns: the flags of the subcommand, the list of steps (one per concurrency, and per rate in the
// open loop), the admin-socket queries around each step's window, and the report (a table, or
// JSON with --json). The load itself comes from LoadGenerator (tools/load_generator.h). Runs in
// the CLI process; no LibTorch.
//
//   torchfarm bench --endpoint EP --model NAME --shape 1,256 [--shape ...] [--dtype float32 ...]
//                   [--concurrency 1,4,16,64] [--depth 1] [--rate R[,R...]] [--seconds 5]
//                   [--warmup 1] [--requests N] [--threads T] [--admin-endpoint EP] [--json]
//                   [--shm [--shm-output-bytes B]] [--arrival fixed|poisson|gamma [--cv X]]
//                   [--slo-ms S] [--clients N --client-rates R1,...,RN]
//   torchfarm bench --echo-server EP
//
// Closed loop (default): each of C clients (one DEALER socket each) keeps --depth requests in
// flight. Open loop (--rate): requests leave on a schedule and latency counts from the scheduled
// time; --arrival draws the gaps (evenly spaced by default; poisson; gamma with --cv X for bursts,
// tools/arrival_process.h). --slo-ms S adds, per step, the ok replies within S ms (within_slo) and
// their rate (within_slo_per_s: goodput). Every step reports requests/s, p50/p90/p99/p99.9 latency,
// errors by code and, with --admin-endpoint, the farm's mean batch size over the window (from
// {"cmd":"stats"}).
// --clients N --client-rates R1,...,RN (instead of --rate and --concurrency): N tenants, each its
// own DEALER socket (so the farm counts N clients, supervisor/intake/client_quota.h) with its own
// open-loop generator at Ri requests/s; --arrival, --cv and --slo-ms apply to each. One step; the
// report's step sums them and its "clients" lists each one's sent, ok, errors, latency and
// within_slo (docs/operations.md, "torchfarm bench").
// --shm (closed loop, same host as the farm): tensors go through client shared memory instead of
// data frames (docs/protocol.md, "Shared-memory tensors"); each client creates one region per step
// with --depth input + output areas and releases it at the end of the step.
//
// Exit codes: 0 every reply ok; 1 some replies were errors; 2 usage; 3 no reply at all.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor_spec.h"
#include "tools/command.h"

namespace torchfarm {

struct LoadSpec;
struct StepResult;

class BenchCommand : public Command {
 public:
  explicit BenchCommand(CLI::App* parent);

  CLI::App* app() const override { return app_; }
  int Run() override;

  // "1,3,32,32" -> {1, 3, 32, 32}; every dimension >= 0.
  static Status ParseShape(const std::string& text, std::vector<int64_t>* shape);
  // The JSON object of one step, as --json prints it in "steps".
  static nlohmann::json StepJson(int concurrency, int depth, double rate, const StepResult& result,
                                 const nlohmann::json& mean_batch_size);
  // --client-rates as N positive finite rates; `text` are the comma-separated parts CLI11 split.
  // Errors name what was expected (N positive numbers, one per --clients) and what came.
  static Status ParseClientRates(const std::vector<std::string>& text, int clients,
                                 std::vector<double>* rates);
  // One client's row of a --clients step: its rate, sent, ok, errors, latency and within_slo.
  static nlohmann::json ClientJson(int client, double rate, const StepResult& result);

 private:
  Status BuildInputs(std::vector<TensorSpec>* inputs) const;
  int RunSteps(const std::vector<TensorSpec>& inputs);
  // --clients: one step of N generators side by side, one client and one rate each.
  int RunClients(const std::vector<TensorSpec>& inputs, const std::vector<double>& rates);
  // The LoadSpec every step shares (endpoint, inputs, timings, arrival, SLO).
  LoadSpec BaseSpec(const std::vector<TensorSpec>& inputs) const;
  // The flags --clients cannot go with, and the rates it needs; OK when --clients is not given.
  Status CheckClientFlags(std::vector<double>* rates) const;
  // Batches and rows the farm ran for the model so far (admin "stats"); null without
  // --admin-endpoint or on failure.
  nlohmann::json ModelCounters() const;
  void PrintTable(const nlohmann::json& report) const;
  // --clients: one line per tenant of `step`.
  void PrintClients(const nlohmann::json& step) const;

  CLI::App* app_;
  std::string endpoint_ = "tcp://127.0.0.1:5555";
  std::string echo_endpoint_;
  std::string admin_endpoint_;
  std::string model_;
  std::vector<std::string> shapes_;
  std::vector<std::string> dtypes_ = {"float32"};
  std::vector<int> concurrency_ = {1, 4, 16, 64};
  std::vector<double> rates_;
  int depth_ = 1;
  double seconds_ = 5;
  double warmup_ = 1;
  int64_t requests_ = 0;
  int threads_ = 0;
  int io_threads_ = 1;
  int io_timeout_ms_ = 10000;
  int64_t timeout_ms_ = 0;
  uint64_t seed_ = 1;
  bool json_ = false;
  bool shm_ = false;
  uint64_t shm_output_bytes_ = 0;
  std::string arrival_ = "fixed";
  double cv_ = 1;
  double slo_ms_ = 0;
  bool client_deadline_ = false;
  int clients_ = 0;
  std::vector<std::string> client_rates_;
  CLI::Option* cv_option_ = nullptr;
  CLI::Option* concurrency_option_ = nullptr;
};

}  // namespace torchfarm
