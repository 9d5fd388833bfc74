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

#include <cstddef>
#include <cstdint>
#include <vector>

namespace torchfarm {

// Fits batch_us = fixed_us + per_row_us * rows from observed batches.
class BatchCostModel {
 public:
  // `weight` of the newest sample in the running means (0 < weight <= 1).
  BatchCostModel() = default;
  explicit BatchCostModel(double weight) : weight_(weight) {}

  void Observe(int64_t rows, double compute_us);
  bool known() const { return samples_ > 0; }
  double fixed_us() const;
  double per_row_us() const;
  // Cost of a batch of `rows`; 0 before the first observation.
  double BatchUs(int64_t rows) const;

 private:
  double weight_ = 0.05;
  int64_t samples_ = 0;
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

}  // namespace torchfarm
