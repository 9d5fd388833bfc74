// How the worker reads a failure of forward() or of a GPU lane, and whether the device still works
// after one. Knows CUDA's error texts but uses only LibTorch's device-neutral calls, so the same
// source builds against a CPU-only LibTorch (Debian's) and a CUDA one. Whether a device exists is
// the accelerator's business (worker/accelerator.h).
//
// Failure classes, by c10::Error text (and by error type where LibTorch has one):
//   kOutOfMemory  "CUDA out of memory" -> the batch is retried as two halves, then fails
//   kSticky       illegal memory access, device-side assert, launch failure, ECC, device lost,
//                 any MPS client/server error …:
//                 the CUDA context is poisoned; the worker exits so the slot restarts (and, after
//                 gpu_failures_before_fallback such failures, falls back to CPU)
//   kOtherDevice  any other "CUDA error": a tiny synchronous probe decides between the two above
//   kModel        everything else: the model's own error, fails only that batch
// Owns nothing. Compute thread only.
#pragma once

#include <c10/core/Device.h>

#include <string>

#include "common/status.h"

namespace torchfarm::worker {

enum class DeviceErrorClass { kModel, kOutOfMemory, kSticky, kOtherDevice };

DeviceErrorClass ClassifyDeviceError(const std::string& message);

// Runs a tiny synchronous computation on `device`; false when it fails (a poisoned context).
bool ProbeDevice(const c10::Device& device);

// Thrown inside the compute thread when the device is unusable; the batch stays unanswered so the
// supervisor runs it elsewhere.
struct FatalDeviceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace torchfarm::worker
