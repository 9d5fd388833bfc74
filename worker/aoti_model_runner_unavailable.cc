// OpenAotiRunner of a build whose LibTorch has no AOTInductor package loader (Debian's 1.13:
// TORCHFARM_HAVE_AOTI is OFF, cmake/TorchfarmTorch.cmake): every package is refused with why.
#include <torch/version.h>

#include "worker/model_runner.h"

namespace torchfarm::worker {

Status OpenAotiRunner(const ModelRunnerOptions&, std::unique_ptr<ModelRunner>*) {
  return InvalidArgument(
      "AOTInductor packages (.pt2, format aoti) need a worker built against LibTorch >= 2.6 with "
      "the package loader; this worker links LibTorch " TORCH_VERSION
      " (built with -DTORCHFARM_TORCH=debian?): build the default (.venv's torch), or serve the "
      "model as TorchScript");
}

}  // namespace torchfarm::worker
