// The CPU accelerator (worker/accelerator.h): one lane, work is done when the call returns, and
// the stage times come from the host clock. Also home of BuiltWithCuda's CPU-only twin when the
// CUDA unit is not compiled in (worker/accelerator_no_cuda.cc).
#include <ATen/Parallel.h>

#include <array>
#include <chrono>
#include <cstring>

#include "worker/accelerator.h"

namespace torchfarm::worker {
namespace {

class CpuAccelerator final : public Accelerator {
 public:
  const c10::Device& device() const override { return device_; }
  int lanes() const override { return 1; }
  Status PinHostMemory(void*, size_t) override { return Status::Ok(); }
  void UnpinHostMemory() override {}
  void Synchronize() override {}
  void UseLane(int) override {}
  void Mark(int, Stage stage) override {
    if (stage == Stage::kStart) marks_.fill({});  // a stage a failed batch skips stays unset
    marks_[static_cast<int>(stage)] = std::chrono::steady_clock::now();
  }
  at::Tensor ToDevice(const at::Tensor& host) override { return host; }
  void CopyToHost(const at::Tensor& source, at::Tensor& host) override {
    // Same type and both dense: memcpy in chunks over the intra-op threads. copy_'s element
    // loop stores through the cache and ran at less than half memcpy's speed on 16 MiB outputs
    // (2.7-3.0 ms against 1.25 ms, one thread; bench/analysis.md).
    if (source.device().is_cpu() && source.scalar_type() == host.scalar_type() &&
        source.sizes() == host.sizes() && source.is_contiguous() && host.is_contiguous()) {
      const auto* from = static_cast<const uint8_t*>(source.data_ptr());
      auto* to = static_cast<uint8_t*>(host.data_ptr());
      if (from == to) return;
      constexpr int64_t kGrainBytes = 1 << 20;
      at::parallel_for(0, static_cast<int64_t>(source.nbytes()), kGrainBytes,
                       [&](int64_t begin, int64_t end) {
                         std::memcpy(to + begin, from + begin, static_cast<size_t>(end - begin));
                       });
      return;
    }
    host.copy_(source);
  }
  bool Poll(int) override { return true; }
  StageTimes Wait(int) override {
    StageTimes times;
    times.h2d_us = Micros(Stage::kStart, Stage::kInputsCopied);
    times.compute_us = Micros(Stage::kInputsCopied, Stage::kComputed);
    times.d2h_us = Micros(Stage::kComputed, Stage::kOutputsCopied);
    return times;
  }
  DeviceReport Report() const override {
    DeviceReport report;
    report.name = "cpu";
    return report;
  }

 private:
  double Micros(Stage from, Stage to) const {
    const auto start = marks_[static_cast<int>(from)];
    const auto end = marks_[static_cast<int>(to)];
    if (start == Instant{} || end == Instant{}) return 0;
    return std::chrono::duration<double, std::micro>(end - start).count();
  }

  using Instant = std::chrono::steady_clock::time_point;
  c10::Device device_{c10::kCPU};
  std::array<Instant, kStageCount> marks_{};
};

}  // namespace

std::unique_ptr<Accelerator> MakeCpuAccelerator() { return std::make_unique<CpuAccelerator>(); }

}  // namespace torchfarm::worker
