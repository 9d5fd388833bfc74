// Where a worker's batches run: the device-specific half of the compute loop, behind one small
// interface so that worker/compute_loop.cc stays device-neutral and the CUDA code lives in one unit
// (worker/accelerator_cuda.cc, compiled only against a CUDA-enabled LibTorch).
//
// A batch runs on a lane. On the CPU there is one lane and every call completes before it
// returns. On a GPU a lane is a CUDA stream: the compute loop launches batch n+1 on the next lane
// while batch n still runs, and publishes a batch's response only after Wait(lane) saw the event
// that closes it. That event also guards the ring slots: the request slot is popped and the
// response slot published only after the copies out of and into them have completed (LibTorch's
// host allocator does not track from_blob memory, so nothing else would).
//
// Per batch, on its lane:  UseLane -> Mark(kStart) -> ToDevice(inputs) -> Mark(kInputsCopied)
//   -> forward -> Mark(kComputed) -> CopyToHost(outputs into the response slot)
//   -> Mark(kOutputsCopied) ... later: Wait(lane) -> stage times, or a device error.
//
// Owns: the device state a worker needs beyond the model (streams, events, the host-memory
// registration of the ring segment). Compute thread only: every method is called by the thread
// that runs forward().
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"

namespace torchfarm::worker {

struct AcceleratorOptions {
  int streams = 1;               // lanes on a GPU; ignored on the CPU (always 1)
  bool cudnn_benchmark = false;  // let cuDNN time its algorithms per input shape
  bool pin_memory = true;        // register the ring segment for asynchronous DMA
};

enum class Stage : int { kStart = 0, kInputsCopied = 1, kComputed = 2, kOutputsCopied = 3 };
inline constexpr int kStageCount = 4;

// Where one batch spent its time, from the device's own clock (CUDA events) or the host's.
struct StageTimes {
  double h2d_us = 0;      // inputs: ring slot -> device
  double compute_us = 0;  // forward()
  double d2h_us = 0;      // outputs: device -> response slot
};

// What the heartbeat reports about the device (the supervisor shows it in stats).
struct DeviceReport {
  std::string name;  // "cpu", "NVIDIA H200"
  int streams = 1;
  bool pinned = false;            // the ring segment is registered with the driver
  bool mps_attached = false;      // the CUDA context runs through an MPS server
  int64_t memory_allocated = -1;  // bytes held by tensors; -1 where unknown
  int64_t memory_reserved = -1;   // bytes the caching allocator holds
};

class Accelerator {
 public:
  virtual ~Accelerator() = default;

  virtual const c10::Device& device() const = 0;
  // Concurrent batches this device can hold (CUDA streams); 1 on the CPU.
  virtual int lanes() const = 0;

  // Registers [base, base+bytes) (the worker's ring segment) for DMA; Unpin undoes it and must run
  // before the segment is unmapped. The CPU does nothing.
  virtual Status PinHostMemory(void* base, size_t bytes) = 0;
  virtual void UnpinHostMemory() = 0;

  // Waits for all work on the device, on every stream (after the model's one-off conversions,
  // which run on the default stream, before the lanes read the result). The CPU does nothing.
  virtual void Synchronize() = 0;
  // Makes `lane` current for the calling thread: LibTorch work launched from now on goes there.
  virtual void UseLane(int lane) = 0;
  virtual void Mark(int lane, Stage stage) = 0;
  // A host tensor (pointing into the request slot) on the device, copied asynchronously on the
  // current lane; the CPU returns it as is.
  virtual at::Tensor ToDevice(const at::Tensor& host) = 0;
  // Copies `source` (on the device) into `host` (pointing into the response slot) on the current
  // lane; complete only after Wait.
  virtual void CopyToHost(const at::Tensor& source, at::Tensor& host) = 0;
  // True when everything launched on `lane` has completed (or failed); never blocks.
  virtual bool Poll(int lane) = 0;
  // Blocks until everything launched on `lane` has completed. A device failure throws c10::Error
  // with CUDA's text, so worker/device_health.h classifies it like a failing forward().
  virtual StageTimes Wait(int lane) = 0;

  virtual DeviceReport Report() const = 0;
};

// The CPU: one lane, synchronous, stage times from the host clock.
std::unique_ptr<Accelerator> MakeCpuAccelerator();

// A CUDA device. Unavailable when this worker was built without CUDA (a CPU-only LibTorch), when
// no driver or device is present, or when `device` names a GPU that is not visible.
Status MakeCudaAccelerator(const c10::Device& device, const AcceleratorOptions& options,
                           std::unique_ptr<Accelerator>* out);

// True when worker/accelerator_cuda.cc was compiled in.
bool BuiltWithCuda();

}  // namespace torchfarm::worker
