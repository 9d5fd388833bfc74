// ModelRunner: the one seam between the compute loop and a model format. The compute thread
// (worker/compute_loop.h) loads one model file through OpenModelRunner and then only calls the
// interface below; it does not know whether a TorchScript module or an AOTInductor package runs.
//
// Formats (docs/models.md):
//   torchscript  torch::jit::load (worker/torchscript_model_runner.h): any TorchScript archive
//                the linked LibTorch reads (saved by that torch or an older one).
//   aoti         torch::inductor::AOTIModelPackageLoader (worker/aoti_model_runner.h): a .pt2
//                package from torch._inductor.aoti_compile_and_package, only in builds whose
//                LibTorch has the loader (TORCHFARM_HAVE_AOTI); others refuse it with the reason.
//   auto         aoti for a path ending in ".pt2", torchscript otherwise.
//
// Optimizing (config "optimize", docs/models.md), after the precision conversion:
//   none         the module runs as loaded.
//   freeze       torch::jit::freeze: parameters and attributes become constants of the graph,
//                which is folded and simplified around them.
//   inference    torch::jit::optimize_for_inference: freeze, then convolution/batch-norm and
//                linear folding; on the CPU with float32 weights, convolution weights kept in
//                oneDNN's layout; on CUDA, cuDNN's fused convolution+ReLU. With fp16/bf16 on
//                the CPU it is little more than freeze.
//   An AOTInductor package is compiled already: it takes none only. A pipeline's pre- and
//   post-processing modules are served as loaded.
//
// Owns: nothing shared; a runner owns its loaded model. Every call runs on the compute thread.
// Errors: Open* returns a Status whose message says what LibTorch said, without the model path
// (the worker's start error names the file); Forward throws what LibTorch throws (c10::Error,
// std::exception), which the compute loop turns into a batch's error.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor_spec.h"

namespace torchfarm::worker {

enum class ModelFormat { kTorchScript, kAoti };
enum class ModelOptimize { kNone, kFreeze, kInference };

// "torchscript" or "aoti", as configs and logs spell them.
const char* ModelFormatName(ModelFormat format);
// `format` "auto" (or empty), "torchscript" or "aoti"; InvalidArgument naming what was received
// otherwise.
Status ResolveModelFormat(const std::string& path, const std::string& format, ModelFormat* out);
// "none", "freeze" or "inference"; InvalidArgument naming what was received otherwise.
Status ParseModelOptimize(const std::string& text, ModelOptimize* out);
const char* ModelOptimizeName(ModelOptimize mode);

struct ModelRunnerOptions {
  std::string path;
  std::string format = "auto";
  c10::Device device{c10::kCPU};
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual ModelFormat format() const = 0;
  // Floating parameters and buffers to `type` (fp16/bf16 from the instance's precision). A
  // format that cannot convert returns InvalidArgument saying so.
  virtual Status ConvertPrecision(c10::ScalarType type) = 0;
  // Prepares the model for serving as `mode` says (above); after ConvertPrecision, before any
  // forward. InvalidArgument with LibTorch's words when the model cannot be prepared that way
  // (an interface call freezing cannot resolve, for one). Some failures of an optimized graph
  // show only when it runs: the compute loop's warm-up says which setting to try then.
  virtual Status Optimize(ModelOptimize mode) = 0;
  // Checks a batch's inputs against what the model can take before anything runs (a package
  // compiled for a fixed batch takes that batch only): InvalidArgument with expected and received.
  virtual Status CheckInputs(const std::vector<c10::IValue>& inputs) const = 0;
  // One forward; the result is a tensor, or a tuple/list of them.
  virtual c10::IValue Forward(const std::vector<c10::IValue>& inputs) = 0;
  // What the model file declares about its inputs and outputs (-1: variable); empty when it
  // declares nothing (TorchScript).
  virtual std::vector<TensorSpec> declared_inputs() const { return {}; }
  virtual std::vector<TensorSpec> declared_outputs() const { return {}; }
  // One line for the load log: format, and what the file declares ("batch 1..256").
  virtual std::string Describe() const = 0;
  // forward()'s graph as TorchScript prints it (tests, debugging); empty for a compiled package.
  virtual std::string GraphText() const { return {}; }
};

Status OpenModelRunner(const ModelRunnerOptions& options, std::unique_ptr<ModelRunner>* out);

// The implementations (one file each).
Status OpenTorchScriptRunner(const ModelRunnerOptions& options, std::unique_ptr<ModelRunner>* out);
// Defined by worker/aoti_model_runner.cc, or by aoti_model_runner_unavailable.cc in a build whose
// LibTorch has no AOTInductor package loader (Debian's 1.13).
Status OpenAotiRunner(const ModelRunnerOptions& options, std::unique_ptr<ModelRunner>* out);

}  // namespace torchfarm::worker
