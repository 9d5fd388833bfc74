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

Status OpenModelRunner(const ModelRunnerOptions& options, std::unique_ptr<ModelRunner>* out) {
  ModelFormat format;
  if (Status status = ResolveModelFormat(options.path, options.format, &format); !status.ok())
    return status;
  return format == ModelFormat::kAoti ? OpenAotiRunner(options, out)
                                      : OpenTorchScriptRunner(options, out);
}

}  // namespace torchfarm::worker
