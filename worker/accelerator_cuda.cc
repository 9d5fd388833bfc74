// The CUDA accelerator (worker/accelerator.h), compiled only against a CUDA-enabled LibTorch. The
// one file of torchfarm that names CUDA: streams from LibTorch's pool (one per lane), four timing
// events per lane, cudaHostRegister of the ring segment, MPS attachment and the caching
// allocator's memory counters.
//
// Why the events matter beyond timing: inputs are wrapped with from_blob over the request slot
// and copied with non_blocking=true, outputs are copied straight into the response slot the same
// way. LibTorch's pinned-host allocator only tracks memory it allocated itself, so nothing in
// LibTorch keeps a slot alive until its copy has finished; the compute loop pops a request slot
// and publishes a response slot only after Wait(lane) has seen the lane's last event.
//
// Calls that only touch LibTorch APIs present in both 1.13 and 2.x are used here
// (getStreamFromPool, setCurrentCUDAStream, getDeviceStats, Context::setBenchmarkCuDNN), so the
// unit builds against Debian's 1.13 headers (the CPU build compile-checks it when a CUDA toolkit is
// installed) and against a pip PyTorch 2.x with CUDA 13.
#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <array>
#include <string>
#include <vector>

#include "common/log.h"
#include "worker/accelerator.h"

namespace torchfarm::worker {
namespace {

std::string CudaErrorText(cudaError_t error, const char* what) {
  return std::string("CUDA error: ") + cudaGetErrorString(error) + " (" + cudaGetErrorName(error) +
         " in " + what + ")";
}

// Throws c10::Error, the type every caller already classifies (worker/device_health.h).
void CheckCuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    // A failed call leaves its code as the thread's "last error"; clear it so LibTorch's own
    // launch checks do not later blame an unrelated kernel.
    (void)cudaGetLastError();
    TORCH_CHECK(false, CudaErrorText(error, what));
  }
}

class CudaAccelerator final : public Accelerator {
 public:
  CudaAccelerator(c10::Device device, const AcceleratorOptions& options)
      : device_(device), options_(options) {}

  ~CudaAccelerator() override {
    UnpinHostMemory();
    for (auto& lane : events_) {
      for (cudaEvent_t event : lane) {
        if (event != nullptr) (void)cudaEventDestroy(event);
      }
    }
    (void)cudaGetLastError();
  }

  Status Init() {
    const int index = device_.index();
    cudaError_t error = cudaSetDevice(index);
    if (error != cudaSuccess) return Unavailable(CudaErrorText(error, "cudaSetDevice"));
    at::globalContext().setBenchmarkCuDNN(options_.cudnn_benchmark);
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, index) == cudaSuccess) name_ = properties.name;
    int mps = 0;
    if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, index) == cudaSuccess) {
      mps_attached_ = mps != 0;
    }
    (void)cudaGetLastError();
    const int streams = options_.streams < 1 ? 1 : options_.streams;
    for (int lane = 0; lane < streams; ++lane) {
      streams_.push_back(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index()));
      std::array<cudaEvent_t, kStageCount> events{};
      for (cudaEvent_t& event : events) {
        error = cudaEventCreate(&event);
        if (error != cudaSuccess) return Unavailable(CudaErrorText(error, "cudaEventCreate"));
      }
      events_.push_back(events);
      marked_.push_back(0);
    }
    TF_LOG(kInfo) << "CUDA device ready" << Kv("device", device_.str()) << Kv("name", name_)
                  << Kv("streams", streams) << Kv("mps_attached", mps_attached_)
                  << Kv("cudnn_benchmark", options_.cudnn_benchmark);
    return Status::Ok();
  }

  const c10::Device& device() const override { return device_; }
  int lanes() const override { return static_cast<int>(streams_.size()); }

  Status PinHostMemory(void* base, size_t bytes) override {
    if (!options_.pin_memory || pinned_base_ != nullptr) return Status::Ok();
    // Portable: pinned for every CUDA context of this process, not only the current device's.
    // A worker computes on one device, but a model may move tensors to another GPU, whose
    // context would otherwise copy from this segment as pageable memory. It costs nothing.
    cudaError_t error = cudaHostRegister(base, bytes, cudaHostRegisterPortable);
    if (error != cudaSuccess) {
      (void)cudaGetLastError();
      return Unavailable(CudaErrorText(error, "cudaHostRegister of the ring segment"));
    }
    pinned_base_ = base;
    return Status::Ok();
  }

  void UnpinHostMemory() override {
    if (pinned_base_ == nullptr) return;
    // A loop that ended on an exception may leave copies into the ring in flight on other lanes.
    (void)cudaDeviceSynchronize();
    (void)cudaGetLastError();
    cudaError_t error = cudaHostUnregister(pinned_base_);
    if (error != cudaSuccess) {
      (void)cudaGetLastError();
      TF_LOG(kWarn) << "cannot unregister the ring segment"
                    << Kv("error", CudaErrorText(error, "cudaHostUnregister"));
    }
    pinned_base_ = nullptr;
  }

  void Synchronize() override { CheckCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

  void UseLane(int lane) override { c10::cuda::setCurrentCUDAStream(streams_.at(lane)); }

  void Mark(int lane, Stage stage) override {
    const int index = static_cast<int>(stage);
    if (stage == Stage::kStart) marked_[lane] = 0;
    CheckCuda(cudaEventRecord(events_[lane][index], streams_[lane].stream()), "cudaEventRecord");
    marked_[lane] |= 1u << index;
  }

  at::Tensor ToDevice(const at::Tensor& host) override {
    // From a registered slot this is an asynchronous DMA on the current lane's stream.
    return host.to(at::TensorOptions().device(device_), /*non_blocking=*/true);
  }

  void CopyToHost(const at::Tensor& source, at::Tensor& host) override {
    host.copy_(source, /*non_blocking=*/true);
  }

  bool Poll(int lane) override {
    cudaError_t status = cudaStreamQuery(streams_[lane].stream());
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    return true;  // done, or failed: Wait reports the failure
  }

  StageTimes Wait(int lane) override {
    CheckCuda(cudaStreamSynchronize(streams_[lane].stream()), "cudaStreamSynchronize");
    StageTimes times;
    times.h2d_us = Elapsed(lane, Stage::kStart, Stage::kInputsCopied);
    times.compute_us = Elapsed(lane, Stage::kInputsCopied, Stage::kComputed);
    times.d2h_us = Elapsed(lane, Stage::kComputed, Stage::kOutputsCopied);
    marked_[lane] = 0;
    return times;
  }

  DeviceReport Report() const override {
    DeviceReport report;
    report.name = name_;
    report.streams = lanes();
    report.pinned = pinned_base_ != nullptr;
    report.mps_attached = mps_attached_;
    try {
      // Index 0 is StatType::AGGREGATE in every LibTorch since 1.x; the enum's namespace moved.
      const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
      report.memory_allocated = stats.allocated_bytes[0].current;
      report.memory_reserved = stats.reserved_bytes[0].current;
    } catch (const c10::Error&) {
      // The allocator is initialised by the first CUDA tensor: a model without parameters and
      // without warm-up has none yet. The counters stay unknown (-1).
    }
    return report;
  }

 private:
  double Elapsed(int lane, Stage from, Stage to) {
    const unsigned both = (1u << static_cast<int>(from)) | (1u << static_cast<int>(to));
    if ((marked_[lane] & both) != both) return 0;  // a failed batch skipped a stage
    float ms = 0;
    if (cudaEventElapsedTime(&ms, events_[lane][static_cast<int>(from)],
                             events_[lane][static_cast<int>(to)]) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return static_cast<double>(ms) * 1000.0;
  }

  const c10::Device device_;
  const AcceleratorOptions options_;
  std::string name_;
  bool mps_attached_ = false;
  std::vector<c10::cuda::CUDAStream> streams_;
  std::vector<std::array<cudaEvent_t, kStageCount>> events_;
  std::vector<unsigned> marked_;  // bit per Stage recorded since the lane's last kStart
  void* pinned_base_ = nullptr;
};

}  // namespace

Status MakeCudaAccelerator(const c10::Device& device, const AcceleratorOptions& options,
                           std::unique_ptr<Accelerator>* out) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return Unavailable(device.str() + " requested, but CUDA reports no usable device: " +
                       CudaErrorText(error, "cudaGetDeviceCount"));
  }
  const int index = device.has_index() ? device.index() : 0;
  if (index >= count) {
    return Unavailable(device.str() + " requested but " + std::to_string(count) +
                       " CUDA device(s) are visible");
  }
  auto accelerator = std::make_unique<CudaAccelerator>(
      c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)), options);
  Status status = accelerator->Init();
  if (!status.ok()) return status;
  *out = std::move(accelerator);
  return Status::Ok();
}

bool BuiltWithCuda() { return true; }

}  // namespace torchfarm::worker
