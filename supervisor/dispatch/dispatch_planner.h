// Work-conserving batch sizing: how many rows the next batch for a chosen worker may take, so the
// queue is split across workers that can accept instead of one worker getting one big batch while
// another idles. Pure functions of the queue, the workers' loads and the measured batch cost;
// unit-tested without processes. Runs on the supervisor's loop thread.
//
// Cost model: a batch of n rows occupies its worker for fixed + per_row * n microseconds
// (BatchCostModel fits both from the compute times workers report, with exponential forgetting),
// and every batch costs the supervisor `dispatch_us` of serial work. A worker's backlog is the cost
// of the batches it already holds.
//
// Plan: water-fill the queued rows over the accepting workers: find the level L at which every
// worker below L gets rows to reach it, and give the chosen (least-loaded) worker its share. The
// split is taken only when it finishes the queue sooner than one batch on the chosen worker would
// (the batches after the first also wait for the supervisor's dispatch work); otherwise the whole
// queue (up to max_batch_size) goes to the chosen worker.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace torchfarm {

// Fits batch_us = fixed_us + per_row_us * rows from observed batches.
//
// Robust to stalls: a batch whose worker was descheduled, SIGSTOPped or paging reports a compute
// time hundreds of times its real cost, and one such sample must not make the early deadline
// refusal (dispatcher.h CheckDeadline) or the dispatch lead believe the model is that slow.
//   - The first kWarmupSamples batches are held and fitted together once all are in, leaving out
//     those over kOutlierFactor times the median both per row and in all (a stalled first batch;
//     a small batch of a fixed-cost model is dear per row only, and kept). Until then known() is
//     false and callers fall back to their no-cost behaviour.
//   - After that a sample counts at most kOutlierFactor times the current estimate for its rows,
//     so one stall moves the estimate by at most weight * (kOutlierFactor - 1), while a real
//     slowdown still raises it by that much per batch (doubling in ~5 batches at the default).
class BatchCostModel {
 public:
  static constexpr int kWarmupSamples = 5;
  static constexpr double kOutlierFactor = 4;
  // Workers report whole microseconds: a model can measure 0; outlier limits start at this.
  static constexpr double kFloorUs = 1;

  // `weight` of the newest sample in the running means (0 < weight <= 1).
  BatchCostModel() = default;
  explicit BatchCostModel(double weight) : weight_(weight) {}

  void Observe(int64_t rows, double compute_us);
  bool known() const { return samples_ >= kWarmupSamples; }
  double fixed_us() const;
  double per_row_us() const;
  // Cost of a batch of `rows`; 0 before known().
  double BatchUs(int64_t rows) const;

 private:
  struct Sample {
    double rows = 0, us = 0;
  };
  void Update(double rows, double us, double weight);
  void FitWarmup();
  static double Median(double values[kWarmupSamples]);  // reorders `values`

  double weight_ = 0.05;
  int64_t samples_ = 0;
  Sample warmup_[kWarmupSamples];
  double mean_rows_ = 0, mean_us_ = 0, mean_rows2_ = 0, mean_rows_us_ = 0;
};

struct WorkerLoad {
  double backlog_us = 0;  // estimated cost of the batches it holds
  bool can_accept = false;
};

struct SplitInputs {
  int64_t queued_rows = 0;       // rows of the batch-compatible queue (what one batch could take)
  int64_t max_batch_rows = 1;    // max_batch_size
  std::vector<WorkerLoad> workers;
  size_t chosen = 0;             // index in `workers` of the worker the batch goes to
  double fixed_us = 0;
  double per_row_us = 0;
  double dispatch_us = 0;        // the supervisor's own cost per batch
};

// Rows the chosen worker's next batch may take (>= 1, <= max_batch_rows).
int64_t PlanBatchRows(const SplitInputs& in);
// What PlanBatchRows answers when there is nothing to split: the whole queue, up to a batch, at
// least one row.
inline int64_t WholeBatchRows(int64_t queued_rows, int64_t max_batch_rows) {
  return std::max<int64_t>(1, std::min(queued_rows, max_batch_rows));
}

// Latency objective (a model's latency_slo_ms, docs/scheduling.md): what the measured cost says
// about a request's deadline. Times are microseconds from now.
struct SloCost {
  double fixed_us = 0;
  double per_row_us = 0;
  int64_t max_batch_rows = 1;
};

// When a request of `rows` that arrives now would be answered: the earliest a serving worker
// frees (`earliest_free_us`), then the rows queued ahead of it, run in batches of max_batch_rows
// shared over `ready_workers`, then its own batch. An estimate (the batches ahead may take it
// along); used to refuse at once what cannot make its deadline.
double EstimatedFinishUs(const SloCost& cost, double earliest_free_us, int64_t queued_rows,
                         int ready_workers, int64_t rows);

// Rows of the largest batch, at most cost.max_batch_rows, that a worker busy for `backlog_us`
// finishes before the head's deadline `until_deadline_us` from now; 0 when not even the head's
// own `head_rows` would (the head cannot make it: shed it). The head's deadline is the batch's
// earliest (with one latency_slo_ms every later request's deadline is later).
int64_t SloBatchRows(const SloCost& cost, double backlog_us, double until_deadline_us,
                     int64_t head_rows);

}  // namespace torchfarm
