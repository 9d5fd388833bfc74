#include "worker/model_runner.h"

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

Status ParseModelOptimize(const std::string& text, ModelOptimize* out) {
  if (text == "none") {
    *out = ModelOptimize::kNone;
  } else if (text == "freeze") {
    *out = ModelOptimize::kFreeze;
  } else if (text == "inference") {
    *out = ModelOptimize::kInference;
  } else {
    return InvalidArgument("optimize: expected none, freeze or inference, got '" + text + "'");
  }
  return Status::Ok();
}

const char* ModelOptimizeName(ModelOptimize mode) {
  switch (mode) {
    case ModelOptimize::kNone:
      return "none";
    case ModelOptimize::kFreeze:
      return "freeze";
    case ModelOptimize::kInference:
      return "inference";
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
