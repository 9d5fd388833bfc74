// The TorchScript ModelRunner (worker/model_runner.h): torch::jit::load onto the worker's device,
// eval(), forward() through the interpreter. A TorchScript archive saved by an older torch loads
// in a newer LibTorch (1.13's in 2.15); one saved by a newer torch may use operators an older
// LibTorch lacks, which torch::jit::load reports ("Unknown builtin op: ...").
#include <torch/script.h>

#include "worker/model_runner.h"
#include "worker/torch_compat.h"

namespace torchfarm::worker {
namespace {

class TorchScriptModelRunner final : public ModelRunner {
 public:
  explicit TorchScriptModelRunner(torch::jit::Module module) : module_(std::move(module)) {}

  ModelFormat format() const override { return ModelFormat::kTorchScript; }

  Status ConvertPrecision(c10::ScalarType type) override {
    if (type != c10::kFloat) CastFloatingState(module_, type);
    return Status::Ok();
  }

  Status Optimize(ModelOptimize mode) override {
    if (mode == ModelOptimize::kNone) return Status::Ok();
    try {
      // Frozen first, always: optimize_for_inference freezes only a module that has a
      // "training" attribute (one scripted from Python) and takes any other for frozen already,
      // so a module built another way would keep reading its weights from attributes. Freezing
      // a frozen module changes nothing. The loaded module is dropped with its parameters.
      module_ = torch::jit::freeze(module_);
      if (mode == ModelOptimize::kInference) module_ = torch::jit::optimize_for_inference(module_);
      optimized_ = mode;
    } catch (const c10::Error& e) {
      return OptimizeFailed(mode, ErrorText(e));
    } catch (const std::exception& e) {  // the JIT's own errors (torch::jit::ErrorReport)
      return OptimizeFailed(mode, e.what());
    }
    return Status::Ok();
  }

  // The interpreter checks what forward() does with its inputs, per batch.
  Status CheckInputs(const std::vector<c10::IValue>&) const override { return Status::Ok(); }

  c10::IValue Forward(const std::vector<c10::IValue>& inputs) override {
    return module_.forward(inputs);
  }

  std::string GraphText() const override {
    return module_.get_method("forward").graph()->toString();
  }

  std::string Describe() const override {
    switch (optimized_) {
      case ModelOptimize::kNone:
        break;
      case ModelOptimize::kFreeze:
        return "torchscript, frozen";
      case ModelOptimize::kInference:
        return "torchscript, optimized for inference";
    }
    return "torchscript";
  }

 private:
  static Status OptimizeFailed(ModelOptimize mode, const std::string& why) {
    return InvalidArgument(std::string("optimize \"") + ModelOptimizeName(mode) +
                           "\": LibTorch could not prepare the module: " + why +
                           " (set the model's optimize to \"none\")");
  }

  torch::jit::Module module_;
  ModelOptimize optimized_ = ModelOptimize::kNone;
};

}  // namespace

Status OpenTorchScriptRunner(const ModelRunnerOptions& options, std::unique_ptr<ModelRunner>* out) {
  try {
    torch::jit::Module module = torch::jit::load(options.path, options.device);
    module.eval();
    if (!module.find_method("forward")) {
      return InvalidArgument("the module has no forward() method");
    }
    *out = std::make_unique<TorchScriptModelRunner>(std::move(module));
  } catch (const c10::Error& e) {
    return InvalidArgument(ErrorText(e));
  }
  return Status::Ok();
}

}  // namespace torchfarm::worker
