// MakeCudaAccelerator for a worker built against a CPU-only LibTorch (Debian's): every GPU
// request is refused with a reason, and the supervisor falls back to the CPU
// (gpu_failures_before_fallback). Replaced by worker/accelerator_cuda.cc in CUDA builds.
#include "worker/accelerator.h"

namespace torchfarm::worker {

Status MakeCudaAccelerator(const c10::Device& device, const AcceleratorOptions&,
                           std::unique_ptr<Accelerator>*) {
  return Unavailable(device.str() +
                     " requested, but this torchfarm-worker was not built with CUDA (it was "
                     "built against a CPU-only LibTorch; rebuild against a CUDA LibTorch, see "
                     "docs/gpu.md)");
}

bool BuiltWithCuda() { return false; }

}  // namespace torchfarm::worker
