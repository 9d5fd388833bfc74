// The queue of one model's accepted requests and the dynamic-batching policy that drains it.
//
// Owns: the requests waiting for a worker, one queue per priority level (0 is served first), and
// within a level each client's share. Policy is pure: TakeBatch(now) decides from the queue and
// the injected time alone, so it is unit-tested without processes or sleeps. Runs on the
// supervisor's loop thread.
//
// Fairness between clients (fair_queueing, the default): a level is ordered by start-time fair
// queueing. Each request gets a tag, the later of the level's virtual time when it arrived and
// the end of its client's previous request (kept until the virtual time passes it, so a client
// that sends one request at a time is not ahead of everyone each time); a request ends `rows`
// after its tag. The level is kept in tag order and the virtual time moves to the tag
// of each batch's head. So a client with a backlog of N rows is served one turn in each
// round-robin round (weighted by rows), and a newly arriving light client is next after the
// requests already due in the current round, never behind another client's backlog. Batches
// still mix clients: they are formed in tag order. fair_queueing false: each level is one FIFO.
// Equal tags keep arrival order, so one client's requests are always FIFO among themselves.
// Weights (PendingRequest::client_weight, resolved at intake from the model's client_weights,
// common/client_weights.h): a request ends rows / weight after its tag, in units of
// 1/kFairUnitsPerRow of a row, so backlogged clients of weights 1:2:4 are served rows 1:2:4.
//
// A batch is formed from the head of the highest non-empty level: the head request plus later
// requests of that level that are BatchCompatible with it, in order, while the rows stay within
// max_batch_size and the bytes within the ring slot. It is sent when:
//   - it is full (max_batch_size rows), or
//   - a prefix of it is exactly a preferred batch size (the largest such prefix goes), or
//   - the head has waited max_queue_delay_us (0: at once), or
//   - a queued request's deadline is within the dispatch lead (set_dispatch_lead: the model's
//     measured batch time): waiting for company any longer would let it expire, or
//   - the head cannot be merged (alone, or larger than max_batch_size).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/config.h"
#include "supervisor/dispatch/deadline_set.h"
#include "supervisor/intake/pending_request.h"

namespace torchfarm {

struct BatchingPolicy {
  int64_t max_batch_size = 1;
  int64_t max_queue_delay_us = 0;
  std::vector<int64_t> preferred_batch_sizes;  // ascending
  int64_t max_queue_size = 1024;
  int priority_levels = 1;
  uint64_t max_batch_bytes = UINT64_MAX;  // the data capacity of a ring slot
  bool fair_queueing = true;
};

BatchingPolicy BatchingPolicyFor(const ModelConfig& model);

class ModelQueue {
 public:
  explicit ModelQueue(BatchingPolicy policy);

  // A reload changed the model's batching settings; queued requests are queued again in their
  // order (and are never refused, even if max_queue_size shrank below the queue's length).
  void SetPolicy(BatchingPolicy policy);

  // Queues a request in its priority level (clamped to the last level), at its client's fair
  // place, taking the pointer (null after). Returns false, leaving `request` untouched, when
  // max_queue_size requests are queued.
  bool Push(HeldRequest& request);
  // The same for a request not yet held (tests, tools): moved into a new one when queued.
  bool Push(PendingRequest& request);
  // Puts requests back at the front of their levels (after a worker died holding them), keeping
  // their order. Never refused: they were accepted already.
  void PushFront(std::vector<HeldRequest> requests);

  // The next batch to send now, or empty when nothing is due (see NextDue). Whether a batch is
  // due is decided on max_batch_size; `row_cap` then limits its rows (the supervisor caps batches
  // to split a due queue over several workers, supervisor/dispatch/dispatch_planner.h).
  std::vector<HeldRequest> TakeBatch(TimePoint now, int64_t row_cap = INT64_MAX);
  // Rows (dim 0) of every queued request.
  int64_t queued_rows() const { return rows_; }
  // Rows that would be served before `request` were it pushed now: the higher levels, and in its
  // own level the requests whose fair tag is at or before the one it would get (all of the level
  // without fair queueing). What a latency objective's refusal counts: a light client's request
  // goes before a heavy client's backlog, so that backlog is not ahead of it.
  int64_t RowsAheadOf(const PendingRequest& request) const;
  // When the next batch comes due if it waits for company: the head's delay running out, or the
  // earliest deadline less the dispatch lead.
  std::optional<TimePoint> NextDue() const;
  // How long before a request's deadline its batch must leave to be served in time: the model's
  // measured batch time (the dispatcher keeps it current); a millisecond until it is known, so
  // the loop can wake and hand the batch over before the deadline. 0: at the deadline itself.
  void set_dispatch_lead(Clock::duration lead) { dispatch_lead_ = lead; }

  // The request the next batch starts with (the head of the highest non-empty level), or null.
  const PendingRequest* Head() const;
  // Removes and returns that request (the queue must not be empty).
  HeldRequest PopHead();

  // Removes and returns every queued request whose deadline is at or before `now`.
  std::vector<HeldRequest> TakeExpired(TimePoint now);
  // The earliest queued deadline.
  std::optional<TimePoint> NextDeadline() const;
  std::vector<HeldRequest> TakeAll();

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Clients with requests queued (all levels; a client in two levels counts twice).
  size_t clients() const;
  const BatchingPolicy& policy() const { return policy_; }

  // Virtual time a one-row request of weight 1 takes: fine enough for weights down to 0.01 (a row
  // is 10^6 units then; int64 tags last 9*10^12 such rows).
  static constexpr int64_t kFairUnitsPerRow = 10'000;
  // The virtual time `request` takes: its rows (at least 1) over its weight (<= 0: weight 1).
  static int64_t FairCost(const PendingRequest& request);

 private:
  struct ClientShare {
    int64_t finish = 0;  // virtual time at which its last queued request ends
    size_t queued = 0;
  };
  using Requests = std::deque<HeldRequest>;
  struct Level {
    Requests requests;                    // in fair_tag order (arrival order when not fair)
    int64_t virtual_time = 0;             // the tag of the last batch head taken
    int64_t rows = 0;                     // rows of its requests
    std::unordered_map<std::string, ClientShare> clients;
  };

  // The tag a request of the client with `share` (null: none yet) would get in `level` if pushed
  // now.
  static int64_t NextTag(const Level& level, const ClientShare* share);
  Level* HighestLevel();
  const Level* HighestLevel() const;
  Level& LevelOf(const PendingRequest& request);
  // Counts `request` in and out of the queue's totals and its client's share.
  // `share`: the request's client share when the caller holds it already (one lookup a push).
  void Added(Level& level, const PendingRequest& request, ClientShare* share = nullptr);
  void Removed(Level& level, const PendingRequest& request);
  // Into *picked: indices (ascending) of the requests that would form the batch headed by
  // level.front().
  void Candidates(const Requests& level, int64_t max_rows, int64_t* rows,
                  std::vector<size_t>* picked) const;
  // How far past the head a batch looks for compatible requests.
  size_t ScanWindow() const;
  // The oldest request within the scan window: what the batch delay is counted from.
  TimePoint OldestInWindow(const Requests& level) const;
  // Forgets idle clients whose finish tag the level's virtual time has passed.
  void PruneShares(Level& level);
  size_t PreferredPrefix(const Requests& level, const std::vector<size_t>& picked) const;

  BatchingPolicy policy_;
  std::vector<Level> levels_;
  size_t size_ = 0;
  int64_t rows_ = 0;
  // Every finite deadline queued, so the earliest is exact after any removal.
  DeadlineSet deadlines_;
  Clock::duration dispatch_lead_ = Millis(1);
  static constexpr int kPruneEvery = 64;  // batches taken between sweeps of idle shares
  int takes_since_prune_ = 0;
  std::vector<size_t> picked_;  // TakeBatch's candidates, reused (no allocation a batch)
  // Rows of the last due batch a row cap left in the queue: they are due too.
  int64_t split_rows_left_ = 0;
};

}  // namespace torchfarm
