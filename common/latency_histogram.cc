#include "common/latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace torchfarm {

int LatencyHistogram::BucketOf(int64_t micros) {
  if (micros < kLinearBuckets) return static_cast<int>(std::max<int64_t>(0, micros));
  // Octave o covers [64 * 2^o, 64 * 2^(o+1)), split into kSubBuckets equal parts.
  int octave = 63 - __builtin_clzll(static_cast<uint64_t>(micros)) - 6;
  if (octave >= kOctaves) return kBuckets - 1;
  int64_t base = int64_t{kLinearBuckets} << octave;
  int sub = static_cast<int>((micros - base) / (base / kSubBuckets));
  return kLinearBuckets + octave * kSubBuckets + sub;
}

int64_t LatencyHistogram::UpperBound(int bucket) {
  if (bucket < kLinearBuckets) return bucket;
  int octave = (bucket - kLinearBuckets) / kSubBuckets;
  int sub = (bucket - kLinearBuckets) % kSubBuckets;
  int64_t base = int64_t{kLinearBuckets} << octave;
  return base + (sub + 1) * (base / kSubBuckets) - 1;
}

void LatencyHistogram::Record(int64_t micros) {
  micros = std::max<int64_t>(0, micros);
  ++counts_[static_cast<size_t>(BucketOf(micros))];
  ++count_;
  sum_ += micros;
  max_ = std::max(max_, micros);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  max_ = std::max(max_, other.max_);
}

void LatencyHistogram::Reset() { *this = LatencyHistogram(); }

int64_t LatencyHistogram::Percentile(double percent) const {
  if (count_ == 0) return 0;
  uint64_t rank = static_cast<uint64_t>(std::ceil(percent / 100.0 * static_cast<double>(count_)));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += counts_[static_cast<size_t>(b)];
    if (seen >= rank) return std::min(UpperBound(b), max_);
  }
  return max_;
}

}  // namespace torchfarm
