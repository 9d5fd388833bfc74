// Turns queued requests into batches on workers, and takes back what a dead worker held.
//
// Owns: the dispatch policy (the least-loaded worker that can accept; work-conserving batch sizes
// from the planner, supervisor/dispatch/dispatch_planner.h), requeueing after a worker died
// (attempts counted, the requests of a batch that was running retried alone so a poison request
// fails by itself after max_retries), queue deadlines (a client's timeout_ms: DEADLINE_EXCEEDED;
// the model's max_queue_wait_ms: UNAVAILABLE naming the workers' states), the latency objective
// (a model's latency_slo_ms: refusing at once what cannot make it, shedding queued requests a
// worker would finish too late, batch sizes that finish in time; docs/scheduling.md), and
// answering a request with an error against its model's counters. Works on the Supervisor's models
// and worker pool and answers through its ReplyWriter. Runs on the supervisor's loop thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "supervisor/admin/metrics_exporter.h"
#include "supervisor/dispatch/dispatch_planner.h"
#include "supervisor/dispatch/reply_writer.h"
#include "supervisor/models/served_model.h"
#include "supervisor/workers/worker_pool.h"

namespace torchfarm {

class Dispatcher {
 public:
  struct Options {
    int max_retries = 2;        // times one request may be requeued after its worker died
    bool shm_in_place = true;   // client_shm.in_place, and regions owner-only (no ipc_group)
  };

  Dispatcher(std::vector<ServedModel>& models, WorkerPool& workers, ReplyWriter& replies,
             const TimeSource& clock)
      : models_(models), workers_(workers), replies_(replies), clock_(clock) {}

  void set_options(Options options) { options_ = options; }
  void set_metrics(MetricsExporter* metrics) { metrics_ = metrics; }

  // Sends every due batch to a worker that can take it.
  void DispatchAll();
  // Puts back the requests of a batch its worker held when it died. `was_running`: the batch was
  // on the device, so each of its requests counts an attempt and runs alone from now on.
  void Requeue(InflightBatch& batch, size_t model_index, const std::string& cause,
               bool was_running);
  // Answers the queued requests whose deadline passed.
  void ExpireDeadlines() { ExpireDeadlines(clock_.Now()); }
  void ExpireDeadlines(TimePoint now);
  // DEADLINE_EXCEEDED when `request`'s timeout_ms cannot be met even if a worker took it next:
  // every serving worker of `model` is busy past its deadline by the measured batch cost (a lower
  // bound: the batch running on each may end at once). OK when it might be served in time, and
  // before the model's cost is known.
  // With the model's latency_slo_ms the estimate counts the rows queued ahead too
  // (dispatch_planner.h EstimatedFinishUs).
  // With an SLO, a refusal sets `*only_by_margin` when the unscaled estimate would have accepted
  // it (SloMargin counts only those refusals).
  Status CheckDeadline(const ServedModel& model, const PendingRequest& request, TimePoint now,
                       bool* only_by_margin = nullptr) const;
  // Keeps the queue's dispatch lead at the model's measured batch time, so a batch with a
  // deadline in it leaves while it can still be served (supervisor/dispatch/model_queue.h).
  static void UpdateDispatchLead(ServedModel& model);
  // Answers an accepted request with an error and counts it against its model.
  void Fail(ServedModel& model, PendingRequest& request, const Status& status);
  // "workers: 1 ready, 1 restarting": what an UNAVAILABLE answer tells the client.
  std::string WorkerSummary(const ServedModel& model) const;
  // Caps a request's time in the queue at the model's max_queue_wait_ms.
  static void ApplyQueueWait(const ModelConfig& config, PendingRequest* request);
  // With the model's latency_slo_ms: the request's deadline is at most that long after arrival.
  static void ApplyLatencySlo(const ModelConfig& config, PendingRequest* request);
  // The request's weight in its client's fair share: the model's client_weights for its client,
  // lowered (never raised) by the weight the request asked for (common/client_weights.h).
  static void ApplyClientWeight(const ModelConfig& config, PendingRequest* request);

  uint64_t in_place_batches() const { return shm_in_place_batches_; }

  // One answer to a request with an SLO deadline (answered, or expired in the queue): counted in
  // the model's stats and fed to its SloMargin, which SloCostOf scales the learned cost by.
  static void RecordSloOutcome(ServedModel& model, bool within, TimePoint now);
  // Whether an OK answer sent at `now` to a request of a model with latency_slo_ms made its SLO:
  // within latency_slo_ms of arrival, and by the client's own deadline (timeout_ms,
  // deadline_unix_us, a gRPC deadline) when that is nearer; with deadline_unix_us the time before
  // the supervisor read the request counts, as the client sees it.
  static bool AnsweredWithinSlo(const ModelConfig& config, const PendingRequest& request,
                                TimePoint now);
  // A request refused at intake or shed from the queue because it could not make its SLO;
  // `only_by_margin`: the estimate without the margin would have accepted it (slo_margin.h).
  void RecordSloRefused(ServedModel& model, bool only_by_margin);
  // Nothing of the model's queued (beyond a request being refused) and no batch running.
  bool ModelIdle(const ServedModel& model) const;

 private:
  WorkerSlot* PickSlot(const ServedModel& model);
  // Estimated cost of the batches `slot` holds, in the model's measured microseconds.
  double Backlog(const ServedModel& model, const WorkerSlot& slot) const;
  // Rows the next batch for `chosen` may take (dispatch_planner.h).
  int64_t BatchRowsFor(const ServedModel& model, const WorkerSlot& chosen) const;
  // Latency objective: the model's measured cost, for dispatch_planner.h's SLO functions.
  static SloCost SloCostOf(const ServedModel& model);
  Status CheckSloDeadline(const ServedModel& model, const PendingRequest& request, TimePoint now,
                          bool* only_by_margin) const;
  // When the batches `slot` holds are expected to be done, in service time (the running one
  // half done on average).
  double SloBacklog(const ServedModel& model, const WorkerSlot& slot) const;
  // With latency_slo_ms and a measured cost: answers DEADLINE_EXCEEDED to the heads of the queue
  // that `slot`, the least-loaded worker that can accept, would finish past their deadline, and
  // returns the rows the next batch may take so its head finishes in time (INT64_MAX otherwise).
  int64_t ShedLateHeads(ServedModel& model, const WorkerSlot& slot, TimePoint now);
  // Answers (with the reason) and removes the requests whose client truncated a region they use.
  void FailShrunkRegions(ServedModel& model, std::vector<HeldRequest>* requests);

  std::vector<ServedModel>& models_;
  WorkerPool& workers_;
  ReplyWriter& replies_;
  const TimeSource& clock_;
  MetricsExporter* metrics_ = nullptr;
  Options options_;
  uint64_t next_batch_id_ = 1;
  mutable SplitInputs split_inputs_;  // BatchRowsFor's, reused from one batch to the next
  double dispatch_us_ = 0;  // moving average of the supervisor's own work per batch dispatched
  uint64_t shm_in_place_batches_ = 0;  // handed to workers naming client regions (no ring copy)
};

}  // namespace torchfarm
