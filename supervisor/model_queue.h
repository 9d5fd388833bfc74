// The queue of one model's accepted requests and the dynamic-batching policy that drains it.
//
// Owns: the requests waiting for a worker, one FIFO per priority level (0 is served first; equal
// levels are strictly FIFO, so none starves another). Policy is pure: TakeBatch(now) decides from
// the queue and the injected time alone, so it is unit-tested without processes or sleeps.
// Runs on the supervisor's loop thread.
//
// A batch is formed from the head of the highest non-empty level: the head request plus later
// requests of that level that are BatchCompatible with it, in order, while the rows stay within
// max_batch_size and the bytes within the ring slot. It is sent when:
//   - it is full (max_batch_size rows), or
//   - a prefix of it is exactly a preferred batch size (the largest such prefix goes), or
//   - the head has waited max_queue_delay_us (0: at once), or
//   - the head cannot be merged (alone, or larger than max_batch_size).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "common/clock.h"
#include "common/config.h"
#include "supervisor/pending_request.h"

namespace torchfarm {

struct BatchingPolicy {
  int64_t max_batch_size = 1;
  int64_t max_queue_delay_us = 0;
  std::vector<int64_t> preferred_batch_sizes;  // ascending
  int64_t max_queue_size = 1024;
  int priority_levels = 1;
  uint64_t max_batch_bytes = UINT64_MAX;  // the data capacity of a ring slot
};

BatchingPolicy BatchingPolicyFor(const ModelConfig& model);

class ModelQueue {
 public:
  explicit ModelQueue(BatchingPolicy policy);

  // A reload changed the model's batching settings; queued requests keep their order (and are
  // never refused, even if max_queue_size shrank below the queue's length).
  void SetPolicy(BatchingPolicy policy);

  // Queues a request at the back of its priority level (clamped to the last level). Returns false,
  // leaving `request` untouched, when max_queue_size requests are already queued.
  bool Push(PendingRequest& request);
  // Puts requests back at the front of their levels (after a worker died holding them), keeping
  // their order. Never refused: they were accepted already.
  void PushFront(std::vector<PendingRequest> requests);

  // The next batch to send now, or empty when nothing is due (see NextDue). Whether a batch is
  // due is decided on max_batch_size; `row_cap` then limits its rows (the supervisor caps batches
  // to split a due queue over several workers, supervisor/dispatch_planner.h).
  std::vector<PendingRequest> TakeBatch(TimePoint now, int64_t row_cap = INT64_MAX);
  // Rows (dim 0) of every queued request.
  int64_t queued_rows() const { return rows_; }
  // When the head's delay runs out, if a batch is waiting for company.
  std::optional<TimePoint> NextDue() const;

  // Removes and returns every queued request whose deadline is at or before `now`.
  std::vector<PendingRequest> TakeExpired(TimePoint now);
  // A lower bound of the earliest queued deadline (exact right after TakeExpired).
  std::optional<TimePoint> NextDeadline() const;
  std::vector<PendingRequest> TakeAll();

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const BatchingPolicy& policy() const { return policy_; }

 private:
  std::deque<PendingRequest>* HighestLevel();
  const std::deque<PendingRequest>* HighestLevel() const;
  // Indices (ascending) of the requests that would form the batch headed by level.front().
  std::vector<size_t> Candidates(const std::deque<PendingRequest>& level, int64_t max_rows,
                                 int64_t* rows) const;
  size_t PreferredPrefix(const std::deque<PendingRequest>& level,
                         const std::vector<size_t>& picked) const;

  BatchingPolicy policy_;
  std::vector<std::deque<PendingRequest>> levels_;
  size_t size_ = 0;
  int64_t rows_ = 0;
  // A lower bound of the earliest deadline queued (max: none), so the loop scans the queue for
  // expired requests only when one may have expired, not on every turn.
  TimePoint earliest_deadline_ = TimePoint::max();
  // Rows of the last due batch a row cap left in the queue: they are due too.
  int64_t split_rows_left_ = 0;
};

}  // namespace torchfarm
