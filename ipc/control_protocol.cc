#include "ipc/control_protocol.h"

#include <CLI/CLI.hpp>

#include "common/protocol.h"

namespace torchfarm::ipc {

std::string WorkerRoutingId(int worker_id, int generation) {
  return "w" + std::to_string(worker_id) + "." + std::to_string(generation);
}

nlohmann::json ReadyOutputsJson(const std::vector<TensorSpec>& outputs) {
  nlohmann::json list = nlohmann::json::array();
  for (const TensorSpec& spec : outputs) list.push_back(TensorSpecToJson(spec));
  return list;
}

bool ReadyOutputsFromMessage(const nlohmann::json& message, std::vector<TensorSpec>* out) {
  auto list = message.find("outputs");
  if (list == message.end() || !list->is_array() || list->size() > kMaxOutputs) return false;
  std::vector<TensorSpec> specs;
  for (size_t i = 0; i < list->size(); ++i) {
    TensorSpec spec;
    // -1: a dim the worker's dry runs found variable (common/config.h, OutputProbeBatches).
    if (!TensorSpecFromJson((*list)[i], "outputs[" + std::to_string(i) + "]", true, &spec).ok())
      return false;
    specs.push_back(std::move(spec));
  }
  *out = std::move(specs);
  return true;
}

std::string WorkerLaunchArgs::RoutingId() const { return WorkerRoutingId(worker_id, generation); }

std::vector<std::string> WorkerLaunchArgs::ToArgv(const std::string& worker_binary) const {
  // clang-format off: flag and value in pairs
  std::vector<std::string> argv = {worker_binary,
                                   "--worker-id", std::to_string(worker_id),
                                   "--generation", std::to_string(generation),
                                   "--model-name", model_name,
                                   "--model-path", model_path,
                                   "--device", device,
                                   "--threads", std::to_string(threads),
                                   "--segment", segment,
                                   "--request-doorbell-fd", std::to_string(request_doorbell_fd),
                                   "--response-doorbell-fd", std::to_string(response_doorbell_fd),
                                   "--control", control_endpoint,
                                   "--heartbeat-ms", std::to_string(heartbeat_ms),
                                   "--log-level", log_level,
                                   "--precision", precision,
                                   "--streams", std::to_string(streams),
                                   "--idle-spin-us", std::to_string(idle_spin_us)};
  // clang-format on
  if (model_format != "auto") {
    argv.push_back("--model-format");
    argv.push_back(model_format);
  }
  if (model_optimize != "none") {
    argv.push_back("--model-optimize");
    argv.push_back(model_optimize);
  }
  if (cudnn_benchmark) argv.push_back("--cudnn-benchmark");
  if (!pin_memory) argv.push_back("--no-pin-memory");
  if (!warmup.empty()) {
    argv.push_back("--warmup");
    argv.push_back(warmup);
  }
  if (!probe.empty()) {
    argv.push_back("--probe");
    argv.push_back(probe);
  }
  if (!pipeline.empty()) {
    argv.push_back("--pipeline");
    argv.push_back(pipeline);
  }
  if (!cores.empty()) {
    std::string list;
    for (int c : cores) list += (list.empty() ? "" : ",") + std::to_string(c);
    argv.push_back("--cores");
    argv.push_back(list);
  }
  return argv;
}

Status WorkerLaunchArgs::Parse(int argc, char** argv, WorkerLaunchArgs* out) {
  CLI::App app{"torchfarm-worker: serves one TorchScript model; started by torchfarm-supervisor"};
  WorkerLaunchArgs a;
  std::string cores;
  app.add_option("--worker-id", a.worker_id)->required();
  app.add_option("--generation", a.generation)->required();
  app.add_option("--model-name", a.model_name)->required();
  app.add_option("--model-path", a.model_path)->required();
  app.add_option("--model-format", a.model_format)
      ->check(CLI::IsMember({"auto", "torchscript", "aoti"}));
  app.add_option("--model-optimize", a.model_optimize)
      ->check(CLI::IsMember({"none", "freeze", "inference"}));
  app.add_option("--device", a.device);
  app.add_option("--threads", a.threads)->check(CLI::PositiveNumber);
  app.add_option("--cores", cores);
  app.add_option("--segment", a.segment)->required();
  app.add_option("--request-doorbell-fd", a.request_doorbell_fd)->required();
  app.add_option("--response-doorbell-fd", a.response_doorbell_fd)->required();
  app.add_option("--control", a.control_endpoint)->required();
  app.add_option("--heartbeat-ms", a.heartbeat_ms)->check(CLI::PositiveNumber);
  app.add_option("--log-level", a.log_level);
  app.add_option("--precision", a.precision)->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  app.add_option("--streams", a.streams)->check(CLI::Range(1, 16));
  app.add_flag("--cudnn-benchmark", a.cudnn_benchmark);
  app.add_option("--idle-spin-us", a.idle_spin_us)->check(CLI::Range(0, 100'000));
  bool no_pin = false;
  app.add_flag("--no-pin-memory", no_pin);
  app.add_option("--warmup", a.warmup);
  app.add_option("--probe", a.probe);
  app.add_option("--pipeline", a.pipeline);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return InvalidArgument(std::string(e.what()) +
                           " (torchfarm-worker is started by torchfarm-supervisor, not by hand)");
  }
  a.pin_memory = !no_pin;
  size_t start = 0;
  while (start < cores.size()) {
    size_t comma = cores.find(',', start);
    std::string item = cores.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    try {
      a.cores.push_back(std::stoi(item));
    } catch (const std::exception&) {
      return InvalidArgument("--cores: expected a comma-separated list of core numbers, got '" +
                             cores + "'");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  *out = std::move(a);
  return Status::Ok();
}

}  // namespace torchfarm::ipc
