#include "supervisor/dispatch/model_stats.h"

#include <algorithm>

namespace torchfarm {

using nlohmann::json;

void WindowedHistogram::Rotate(TimePoint now) const {
  if (rotated_ == TimePoint{}) rotated_ = now;
  if (now - rotated_ < kRotation) return;
  // Two rotations without traffic leave nothing recent.
  previous_ = now - rotated_ < 2 * kRotation ? current_ : LatencyHistogram();
  current_.Reset();
  rotated_ = now;
}

void WindowedHistogram::Record(int64_t micros, TimePoint now) {
  Rotate(now);
  current_.Record(micros);
}

LatencyHistogram WindowedHistogram::Snapshot(TimePoint now) const {
  Rotate(now);
  LatencyHistogram merged = current_;
  merged.Merge(previous_);
  return merged;
}

size_t ModelStats::SecondSlot(TimePoint now) {
  int64_t second = std::chrono::duration_cast<std::chrono::seconds>(now - started_).count();
  size_t index = static_cast<size_t>(second) % kSeconds;
  if (second_of_[index] != second) {
    second_of_[index] = second;
    completed_[index] = 0;
    within_[index] = 0;
  }
  return index;
}

void ModelStats::CountCompletion(TimePoint now) { ++completed_[SecondSlot(now)]; }

void ModelStats::RecordSloOutcome(bool within, TimePoint now) {
  if (!within) {
    ++missed_slo_;
    return;
  }
  ++within_slo_;
  ++within_[SecondSlot(now)];
}

void ModelStats::RecordOk(int64_t queue_us, int64_t compute_us, int64_t total_us, TimePoint now) {
  ++requests_;
  queue_us_ += static_cast<uint64_t>(std::max<int64_t>(0, queue_us));
  compute_us_ += static_cast<uint64_t>(std::max<int64_t>(0, compute_us));
  total_us_ += static_cast<uint64_t>(std::max<int64_t>(0, total_us));
  last_completion_ = now;
  queue_.Record(queue_us, now);
  compute_.Record(compute_us, now);
  total_.Record(total_us, now);
  CountCompletion(now);
}

ModelStats::Totals ModelStats::totals() const {
  return Totals{requests_, errors_,     batches_,  rows_,
                queue_us_, compute_us_, total_us_, last_completion_};
}

void ModelStats::RecordError(TimePoint now, StatusCode code) {
  ++errors_;
  CountCode(code);
  last_completion_ = now;
  CountCompletion(now);
}

void ModelStats::RecordBatch(int64_t rows) {
  ++batches_;
  rows_ += static_cast<uint64_t>(std::max<int64_t>(0, rows));
  size_t bucket = 0;
  while (bucket + 1 < kBatchBuckets && (int64_t{1} << bucket) < rows) ++bucket;
  ++batch_buckets_[bucket];
}

double ModelStats::ThroughputOver(TimePoint now, int seconds) const {
  return PerSecondOver(completed_, now, seconds);
}

double ModelStats::GoodputOver(TimePoint now, int seconds) const {
  return PerSecondOver(within_, now, seconds);
}

double ModelStats::PerSecondOver(const std::array<uint64_t, kSeconds>& counts, TimePoint now,
                                 int seconds) const {
  int64_t current = std::chrono::duration_cast<std::chrono::seconds>(now - started_).count();
  // Whole seconds only: the current one is still being counted.
  int64_t span = std::min<int64_t>(seconds, current);
  if (span <= 0) return 0.0;
  uint64_t sum = 0;
  for (int64_t s = current - span; s < current; ++s) {
    size_t index = static_cast<size_t>(s) % kSeconds;
    if (second_of_[index] == s) sum += counts[index];
  }
  return static_cast<double>(sum) / static_cast<double>(span);
}

void ModelStats::RecordStages(const StageTimes& times, TimePoint now) {
  has_stages_ = true;
  if (times.decode_us >= 0) decode_.Record(times.decode_us, now);
  if (times.preprocess_us >= 0) preprocess_.Record(times.preprocess_us, now);
  if (times.postprocess_us >= 0) postprocess_.Record(times.postprocess_us, now);
}

json ModelStats::ToJson(TimePoint now) const {
  auto stage = [&](const WindowedHistogram& h) {
    LatencyHistogram snapshot = h.Snapshot(now);
    return json{{"p50", snapshot.Percentile(50)}, {"p99", snapshot.Percentile(99)},
                {"count", snapshot.count()}};
  };
  json latency = {{"queue", stage(queue_)}, {"compute", stage(compute_)}, {"total", stage(total_)}};
  if (has_stages_) {
    latency["decode"] = stage(decode_);
    latency["preprocess"] = stage(preprocess_);
    latency["postprocess"] = stage(postprocess_);
  }
  json by_code = json::object();
  for (size_t i = 0; i < errors_by_code_.size(); ++i) {
    if (errors_by_code_[i] > 0) {
      by_code[std::string(StatusCodeName(static_cast<StatusCode>(i)))] = errors_by_code_[i];
    }
  }
  json batch_sizes = json::object();
  for (size_t k = 0; k < kBatchBuckets; ++k) {
    if (batch_buckets_[k] == 0) continue;
    // The last bucket holds every larger batch: named by its lower bound, with a "+".
    const std::string bound = k + 1 < kBatchBuckets
                                  ? std::to_string(int64_t{1} << k)
                                  : std::to_string((int64_t{1} << (k - 1)) + 1) + "+";
    batch_sizes[bound] = batch_buckets_[k];
  }
  return {{"requests", requests_},
          {"errors", errors_},
          {"rejected", rejected_},
          {"batches", batches_},
          {"mean_batch_size", mean_batch_size()},
          {"latency_us", latency},
          {"throughput_rps_1s", ThroughputOver(now, 1)},
          {"throughput_rps_60s", ThroughputOver(now, 60)},
          {"batch_sizes", batch_sizes},
          {"slo",
           {{"within", within_slo_},
            {"missed", missed_slo_},
            {"refused", slo_refused_},
            {"margin", slo_margin_},
            {"goodput_rps_1s", GoodputOver(now, 1)},
            {"goodput_rps_60s", GoodputOver(now, 60)}}},
          {"errors_by_code", by_code}};
}

}  // namespace torchfarm
