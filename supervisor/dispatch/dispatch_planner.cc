#include "supervisor/dispatch/dispatch_planner.h"

#include <algorithm>
#include <cmath>

namespace torchfarm {

void BatchCostModel::Update(double rows, double us, double weight) {
  mean_rows_ += weight * (rows - mean_rows_);
  mean_us_ += weight * (us - mean_us_);
  mean_rows2_ += weight * (rows * rows - mean_rows2_);
  mean_rows_us_ += weight * (rows * us - mean_rows_us_);
}

double BatchCostModel::Median(double values[kWarmupSamples]) {
  std::nth_element(values, values + kWarmupSamples / 2, values + kWarmupSamples);
  return values[kWarmupSamples / 2];
}

void BatchCostModel::FitWarmup() {
  double per_row[kWarmupSamples], total[kWarmupSamples];
  for (int i = 0; i < kWarmupSamples; ++i) {
    per_row[i] = warmup_[i].us / warmup_[i].rows;
    total[i] = warmup_[i].us;
  }
  // A stall is slow both per row and in all: a small batch of a model whose fixed cost dominates
  // is dear per row but not in all, and a big batch the other way round; both are kept.
  const double per_row_limit = kOutlierFactor * std::max(Median(per_row), kFloorUs);
  const double total_limit = kOutlierFactor * std::max(Median(total), kFloorUs);
  // An equal-weight mean of the samples kept: the one with the median per-row cost always is.
  int kept = 0;
  for (const Sample& s : warmup_) {
    if (s.us / s.rows > per_row_limit && s.us > total_limit) continue;
    ++kept;
    Update(s.rows, s.us, 1.0 / kept);
  }
}

void BatchCostModel::Observe(int64_t rows, double compute_us) {
  const double x = static_cast<double>(std::max<int64_t>(rows, 1));
  const double us = std::max(0.0, compute_us);
  if (samples_ < kWarmupSamples) {
    warmup_[samples_++] = {x, us};
    if (samples_ == kWarmupSamples) FitWarmup();
    return;
  }
  // Winsorised: a stall counts as a batch kOutlierFactor times slower than expected, no more
  // (the floor keeps a model measured at 0 us, whole microseconds, from taking a stall in full).
  Update(x, std::min(us, kOutlierFactor * std::max(BatchUs(rows), kFloorUs)), weight_);
  ++samples_;
}

double BatchCostModel::per_row_us() const {
  if (!known()) return 0;
  const double variance = mean_rows2_ - mean_rows_ * mean_rows_;
  if (variance > 0.25) {
    const double slope = (mean_rows_us_ - mean_rows_ * mean_us_) / variance;
    // A negative intercept (noise) means no measurable fixed part: fall back to the ratio.
    if (slope >= 0 && mean_us_ - slope * mean_rows_ >= 0) return slope;
  }
  return mean_us_ / mean_rows_;  // one batch size seen so far: all cost counts as per row
}

double BatchCostModel::fixed_us() const {
  if (!known()) return 0;
  return std::max(0.0, mean_us_ - per_row_us() * mean_rows_);
}

double BatchCostModel::BatchUs(int64_t rows) const {
  if (!known()) return 0;
  return fixed_us() + per_row_us() * static_cast<double>(rows);
}

int64_t PlanBatchRows(const SplitInputs& in) {
  const int64_t whole = WholeBatchRows(in.queued_rows, in.max_batch_rows);
  if (in.chosen >= in.workers.size() || in.per_row_us <= 0 || in.queued_rows <= 1) return whole;
  // Start times of a batch on each accepting worker, lowest first.
  std::vector<double> bases;
  for (const WorkerLoad& w : in.workers) {
    if (w.can_accept) bases.push_back(w.backlog_us + in.fixed_us);
  }
  if (bases.size() < 2) return whole;
  std::sort(bases.begin(), bases.end());
  // Water-filling: the k cheapest workers share the rows so that they all finish at `level`.
  const double work = static_cast<double>(in.queued_rows) * in.per_row_us;
  double level = 0, sum = 0;
  size_t used = 0;
  for (size_t k = 1; k <= bases.size(); ++k) {
    sum += bases[k - 1];
    level = (work + sum) / static_cast<double>(k);
    used = k;
    if (k == bases.size() || level <= bases[k]) break;
  }
  const double chosen_base = in.workers[in.chosen].backlog_us + in.fixed_us;
  const double share = (level - chosen_base) / in.per_row_us;
  if (share <= 0) return 1;  // the chosen worker is already past the level: the least it can take
  const int64_t rows = std::clamp<int64_t>(std::llround(share), 1, whole);
  if (in.queued_rows > in.max_batch_rows) return rows;  // more than one batch anyway
  // One batch on the chosen worker against the split, whose later batches also wait for the
  // supervisor to dispatch them.
  const double one_batch = chosen_base + in.per_row_us * static_cast<double>(whole);
  const double split = level + in.dispatch_us * static_cast<double>(used - 1);
  return split < one_batch ? rows : whole;
}

double EstimatedFinishUs(const SloCost& cost, double earliest_free_us, int64_t queued_rows,
                         int ready_workers, int64_t rows) {
  const int64_t max_rows = std::max<int64_t>(1, cost.max_batch_rows);
  const int64_t batches_ahead = (std::max<int64_t>(0, queued_rows) + max_rows - 1) / max_rows;
  const double ahead_us =
      (static_cast<double>(batches_ahead) * cost.fixed_us +
       static_cast<double>(std::max<int64_t>(0, queued_rows)) * cost.per_row_us) /
      std::max(1, ready_workers);
  return std::max(0.0, earliest_free_us) + ahead_us + cost.fixed_us +
         cost.per_row_us * static_cast<double>(rows);
}

int64_t SloBatchRows(const SloCost& cost, double backlog_us, double until_deadline_us,
                     int64_t head_rows) {
  const int64_t max_rows = std::max<int64_t>(1, cost.max_batch_rows);
  const double budget_us = until_deadline_us - std::max(0.0, backlog_us) - cost.fixed_us;
  if (budget_us < cost.per_row_us * static_cast<double>(head_rows)) return 0;
  if (cost.per_row_us <= 0) return std::max(head_rows, max_rows);
  const double fits = std::floor(budget_us / cost.per_row_us);
  return std::max(head_rows, std::min<int64_t>(max_rows, static_cast<int64_t>(fits)));
}

}  // namespace torchfarm
