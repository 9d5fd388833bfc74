// Counters, latency percentiles and throughput of one model, as `torchfarm stats` and `top` show
// them.
//
// Owns: lifetime counters, windowed latency histograms per stage (queue, compute, total; the last
// 30-60 s, so a live view reflects now rather than the whole uptime) and per-second completion
// counts for the 1 s and 60 s throughput. Loop thread only; time is passed in.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/latency_histogram.h"
#include "common/protocol.h"

namespace torchfarm {

// Two histograms rotated every kRotation: a snapshot merges them, covering 30 to 60 s.
class WindowedHistogram {
 public:
  static constexpr std::chrono::seconds kRotation{30};
  void Record(int64_t micros, TimePoint now);
  LatencyHistogram Snapshot(TimePoint now) const;

 private:
  void Rotate(TimePoint now) const;
  mutable LatencyHistogram current_;
  mutable LatencyHistogram previous_;
  mutable TimePoint rotated_{};
};

class ModelStats {
 public:
  explicit ModelStats(TimePoint started) : started_(started) {}

  void RecordOk(int64_t queue_us, int64_t compute_us, int64_t total_us, TimePoint now);
  // The worker pipeline's stages of an answered request (those >= 0; worker/pipeline_stages.h).
  void RecordStages(const StageTimes& times, TimePoint now);
  // An error reply with `code` (counted in errors and errors_by_code).
  void RecordError(TimePoint now, StatusCode code = StatusCode::kInternal);
  // A request refused at intake with `code` (counted in rejected and errors_by_code).
  void RecordRejected(StatusCode code = StatusCode::kResourceExhausted) {
    ++rejected_;
    CountCode(code);
  }
  void RecordBatch(int64_t rows);
  // Latency objective (latency_slo_ms): an OK answer within it (and within the client's nearer
  // deadline, Dispatcher::AnsweredWithinSlo) or not, and a request refused or shed because its
  // measured cost said it could not make it (also counted as an error).
  void RecordSloOutcome(bool within, TimePoint now);
  void RecordSloRefused() { ++slo_refused_; }
  // The latency objective's current SloMargin factor (stats "slo.margin"; 1: the plain estimate).
  void set_slo_margin(double factor) { slo_margin_ = factor; }
  double slo_margin() const { return slo_margin_; }

  // {requests, errors, rejected, batches, mean_batch_size, latency_us: {queue: {p50, p99}, …},
  //  (with a pipeline, latency_us also has decode, preprocess, postprocess)
  //  throughput_rps_1s, throughput_rps_60s,
  //  slo: {within, missed, refused, goodput_rps_1s, goodput_rps_60s} (goodput: OK answers within
  //  latency_slo_ms per second), batch_sizes: {"1": n, "2": n, "4": n, ...} (batches sent by their
  //  rows: up to 1, 2, 4... and over the previous bound; only bounds with batches),
  //  errors_by_code: {"UNAVAILABLE": n, ...}: error replies and intake refusals by code}
  nlohmann::json ToJson(TimePoint now) const;

  // Lifetime sums for the v2 statistics extension (Triton's model statistics): microseconds
  // spent queued, computing and in total over the answered requests, and when the last one
  // completed (a TimePoint of the loop's clock; {} when none has).
  struct Totals {
    uint64_t requests = 0;
    uint64_t errors = 0;
    uint64_t batches = 0;
    uint64_t rows = 0;
    uint64_t queue_us = 0;
    uint64_t compute_us = 0;
    uint64_t total_us = 0;
    TimePoint last_completion{};
  };
  Totals totals() const;

  uint64_t requests() const { return requests_; }
  uint64_t errors() const { return errors_; }
  uint64_t rejected() const { return rejected_; }
  uint64_t within_slo() const { return within_slo_; }
  uint64_t slo_refused() const { return slo_refused_; }
  double mean_batch_size() const { return batches_ ? static_cast<double>(rows_) / batches_ : 0.0; }
  double ThroughputOver(TimePoint now, int seconds) const;
  // OK answers within latency_slo_ms per second over the last `seconds` whole seconds.
  double GoodputOver(TimePoint now, int seconds) const;
  // Batches whose rows were at most 2^k (and more than 2^(k-1)); the last bucket holds the rest.
  static constexpr size_t kBatchBuckets = 22;
  uint64_t batches_in_bucket(size_t k) const { return batch_buckets_[k]; }

 private:
  void CountCompletion(TimePoint now);
  // The ring slot of `now`'s second, emptied when it last held an older second.
  size_t SecondSlot(TimePoint now);
  double PerSecondOver(const std::array<uint64_t, 64>& counts, TimePoint now, int seconds) const;
  void CountCode(StatusCode code) {
    const auto i = static_cast<size_t>(code);
    if (i < errors_by_code_.size()) ++errors_by_code_[i];
  }

  TimePoint started_;
  uint64_t requests_ = 0;
  uint64_t errors_ = 0;
  uint64_t rejected_ = 0;
  std::array<uint64_t, 8> errors_by_code_{};  // by StatusCode
  uint64_t within_slo_ = 0, missed_slo_ = 0, slo_refused_ = 0;
  double slo_margin_ = 1.0;
  uint64_t batches_ = 0;
  uint64_t rows_ = 0;
  uint64_t queue_us_ = 0;
  uint64_t compute_us_ = 0;
  uint64_t total_us_ = 0;
  TimePoint last_completion_{};
  WindowedHistogram queue_;
  WindowedHistogram compute_;
  WindowedHistogram total_;
  WindowedHistogram decode_;  // pipeline stages: in the JSON once one was recorded
  WindowedHistogram preprocess_;
  WindowedHistogram postprocess_;
  bool has_stages_ = false;
  // Completions per whole second since start, in a ring indexed by second % size.
  static constexpr size_t kSeconds = 64;
  std::array<int64_t, kSeconds> second_of_{};
  std::array<uint64_t, kSeconds> completed_{};
  std::array<uint64_t, kSeconds> within_{};  // OK answers within their SLO, by second
  std::array<uint64_t, kBatchBuckets> batch_buckets_{};
};

}  // namespace torchfarm
