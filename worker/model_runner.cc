#include "worker/model_runner.h"

#include <utility>

namespace torchfarm::worker {

const char* ModelFormatName(ModelFormat format) {
  return format == ModelFormat::kAoti ? "aoti" : "torchscript";
}

Status ResolveModelFormat(const std::string& path, const std::string& format, ModelFormat* out) {
  if (format == "torchscript") {
    *out = ModelFormat::kTorchScript;
  } else if (format == "aoti") {
    *out = ModelFormat::kAoti;
  } else if (format.empty() || format == "auto") {
    const std::string suffix = ".pt2";
    const bool package = path.size() >= suffix.size() &&
                         path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
    *out = package ? ModelFormat::kAoti : ModelFormat::kTorchScript;
  } else {
    return InvalidArgument("model format: expected auto, torchscript or aoti, got '" + format +
                           "'");
  }
  return Status::Ok();
}

namespace {
// Each setting with its config spelling: ParseModelOptimize and ModelOptimizeName read it both
// ways.
constexpr std::pair<ModelOptimize, const char*> kOptimizeNames[] = {
    {ModelOptimize::kNone, "none"},
    {ModelOptimize::kFreeze, "freeze"},
    {ModelOptimize::kInference, "inference"}};
}  // namespace

Status ParseModelOptimize(const std::string& text, ModelOptimize* out) {
  for (const auto& [mode, name] : kOptimizeNames) {
    if (text == name) {
      *out = mode;
      return Status::Ok();
    }
  }
  return InvalidArgument("optimize: expected none, freeze or inference, got '" + text + "'");
}

const char* ModelOptimizeName(ModelOptimize mode) {
  for (const auto& [each, name] : kOptimizeNames) {
    if (each == mode) return name;
  }
  return "none";
}

Status OpenModelRunner(const ModelRunnerOptions& options, std::unique_ptr<ModelRunner>* out) {
  ModelFormat format;
  if (Status status = ResolveModelFormat(options.path, options.format, &format); !status.ok())
    return status;
  return format == ModelFormat::kAoti ? OpenAotiRunner(options, out)
                                      : OpenTorchScriptRunner(options, out);
}

}  // namespace torchfarm::worker
