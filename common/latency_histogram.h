// A latency histogram with HDR-style log-linear buckets: exact below 64 us, then 32 buckets per
// power of two (at most ~3% relative error) up to ~4,400 s. Percentiles come from the bucket
// counts, never from a mean.
//
// Owns: fixed-size bucket counts (no allocation after construction). Single-threaded: the
// supervisor's loop thread records and reads it.
#pragma once

#include <array>
#include <cstdint>

namespace torchfarm {

class LatencyHistogram {
 public:
  static constexpr int kLinearBuckets = 64;
  static constexpr int kSubBuckets = 32;
  static constexpr int kOctaves = 26;  // 64 us * 2^26 ~ 4,400 s
  static constexpr int kBuckets = kLinearBuckets + kOctaves * kSubBuckets;

  void Record(int64_t micros);
  void Merge(const LatencyHistogram& other);
  void Reset();

  // The smallest recorded value v such that at least `percent` % of values are <= v (bucket
  // upper bound); 0 when empty.
  int64_t Percentile(double percent) const;
  uint64_t count() const { return count_; }
  int64_t max() const { return max_; }
  double mean() const { return count_ ? static_cast<double>(sum_) / count_ : 0.0; }

  static int BucketOf(int64_t micros);
  static int64_t UpperBound(int bucket);

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  int64_t sum_ = 0;
  int64_t max_ = 0;
};

}  // namespace torchfarm
