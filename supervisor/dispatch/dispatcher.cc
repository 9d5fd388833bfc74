#include "supervisor/dispatch/dispatcher.h"

#include <algorithm>
#include <map>

#include "common/log.h"
#include "supervisor/intake/job_intake.h"

namespace torchfarm {

void Dispatcher::Fail(ServedModel& model, PendingRequest& request, const Status& status) {
  model.stats.RecordError(clock_.Now(), status.code());
  if (metrics_)
    metrics_->RequestDone(model.config.name, model.config.version, status.code(), request.origin);
  replies_.SendError(request, status);
}

void Dispatcher::ApplyQueueWait(const ModelConfig& config, PendingRequest* request) {
  if (config.max_queue_wait_ms <= 0) return;
  const TimePoint limit = request->received + Millis(config.max_queue_wait_ms);
  if (limit < request->deadline) {
    request->deadline = limit;
    request->deadline_is_queue_wait = true;
    request->deadline_is_client = false;
  }
}

void Dispatcher::ApplyLatencySlo(const ModelConfig& config, PendingRequest* request) {
  if (config.latency_slo_ms <= 0) return;
  const TimePoint limit = request->received + Millis(config.latency_slo_ms);
  if (limit < request->deadline) {
    request->deadline = limit;
    request->deadline_is_slo = true;
    request->deadline_is_queue_wait = false;
    request->deadline_is_client = false;
  }
}

void Dispatcher::ApplyClientWeight(const ModelConfig& config, PendingRequest* request) {
  request->client_weight = config.client_weights.Effective(request->client, request->client_weight);
}

SloCost Dispatcher::SloCostOf(const ServedModel& model) {
  // The service time counts the supervisor's and the ring's work per batch, which the worker's
  // compute time leaves out (on a light model, half of it); until it is known, the compute time.
  const BatchCostModel& measured = model.service.known() ? model.service : model.cost;
  const double margin = model.slo_margin.factor();
  return {measured.fixed_us() * margin, measured.per_row_us() * margin,
          model.config.max_batch_size};
}

void Dispatcher::RecordSloOutcome(ServedModel& model, bool within, TimePoint now) {
  model.stats.RecordSloOutcome(within, now);
  model.slo_margin.Observe(within);
  model.stats.set_slo_margin(model.slo_margin.factor());
}

bool Dispatcher::AnsweredWithinSlo(const ModelConfig& config, const PendingRequest& request,
                                   TimePoint now) {
  // With an SLO the deadline is at most latency_slo_ms after arrival (ApplyLatencySlo), nearer
  // when the client's own (timeout_ms, deadline_unix_us, a gRPC deadline) is: what the planner
  // scheduled against. Only max_queue_wait_ms is the farm's, not an objective.
  if (request.deadline != TimePoint::max() && !request.deadline_is_queue_wait) {
    return now <= request.deadline;
  }
  return now <= request.received + Millis(config.latency_slo_ms);
}

bool Dispatcher::ModelIdle(const ServedModel& model) const {
  if (!model.queue.empty()) return false;
  for (size_t i : model.slots) {
    if (workers_[i]->inflight() > 0) return false;
  }
  return true;
}

void Dispatcher::RecordSloRefused(ServedModel& model, bool only_by_margin) {
  model.stats.RecordSloRefused();
  model.slo_margin.ObserveRefusal(only_by_margin, ModelIdle(model));
  model.stats.set_slo_margin(model.slo_margin.factor());
}

double Dispatcher::SloBacklog(const ServedModel& model, const WorkerSlot& slot) const {
  // In service time, the batches it holds, the running one half done on average.
  if (slot.inflight() == 0) return 0;
  const SloCost cost = SloCostOf(model);
  const double backlog = cost.fixed_us * static_cast<double>(slot.inflight()) +
                         cost.per_row_us * static_cast<double>(slot.inflight_rows());
  return backlog - 0.5 * backlog / static_cast<double>(slot.inflight());
}

namespace {

// What a request's deadline is, for the messages that name it.
const char* DeadlineName(const PendingRequest& request) {
  if (request.deadline_is_slo) return "latency_slo_ms";
  return request.deadline_is_client ? "deadline_unix_us" : "timeout_ms";
}

}  // namespace

int64_t Dispatcher::ShedLateHeads(ServedModel& model, const WorkerSlot& slot, TimePoint now) {
  if (model.config.latency_slo_ms <= 0 || !model.cost.known()) return INT64_MAX;
  const SloCost cost = SloCostOf(model);
  const double backlog_us = SloBacklog(model, slot);  // shedding does not change the worker
  const double factor =
      model.slo_margin.factor();  // what `cost` is scaled by (a shed may lower it)
  while (const PendingRequest* head = model.queue.Head()) {
    if (head->deadline == TimePoint::max() || head->deadline_is_queue_wait) return INT64_MAX;
    const double until_us = static_cast<double>(ToMicros(head->deadline - now));
    const int64_t rows = SloBatchRows(cost, backlog_us, until_us, head->rows);
    if (rows > 0) return rows;
    const HeldRequest late_held = model.queue.PopHead();
    PendingRequest& late = *late_held;
    const double own_us =
        backlog_us + cost.fixed_us + cost.per_row_us * static_cast<double>(late.rows);
    const double finish_ms = (static_cast<double>(ToMicros(now - late.received)) + own_us) / 1000;
    // Every term scales with the margin: unscaled, would it have fit?
    RecordSloRefused(model, own_us / factor <= until_us);
    Fail(model, late,
         Status(StatusCode::kDeadlineExceeded,
                "would finish at ~" + std::to_string(std::lround(finish_ms)) +
                    " ms after arrival on the first free worker of model '" + model.config.name +
                    "' (measured batch cost), past its " + DeadlineName(late) + " of " +
                    std::to_string(ToMicros(late.deadline - late.received) / 1000) +
                    " ms; shed before running"));
  }
  return INT64_MAX;
}

void Dispatcher::ExpireDeadlines(TimePoint now) {
  for (auto& model : models_) {
    for (auto& held : model.queue.TakeExpired(now)) {
      PendingRequest& r = *held;
      const std::string waited = std::to_string(ToMicros(now - r.received) / 1000) + " ms";
      if (r.deadline_is_queue_wait) {
        Fail(model, r, Unavailable("no worker of model '" + model.config.name +
                                          "' took this request within max_queue_wait_ms (" +
                                          std::to_string(model.config.max_queue_wait_ms) +
                                          " ms); " + WorkerSummary(model)));
      } else {
        // A client's own deadline nearer than the SLO counts as the SLO's would (as an answer
        // is judged, AnsweredWithinSlo): an accepted request that expired is a miss the margin
        // must see.
        if (model.config.latency_slo_ms > 0) {
          RecordSloOutcome(model, false, now);
        }
        Fail(model, r,
             Status(StatusCode::kDeadlineExceeded,
                    std::string(DeadlineName(r)) + " expired after " + waited +
                        " in the queue of model '" + model.config.name + "'"));
      }
    }
  }
}

Status Dispatcher::CheckDeadline(const ServedModel& model, const PendingRequest& request,
                                 TimePoint now, bool* only_by_margin) const {
  if (only_by_margin) *only_by_margin = false;
  if (request.deadline == TimePoint::max() || request.deadline_is_queue_wait ||
      !model.cost.known()) {
    return Status::Ok();
  }
  if (model.config.latency_slo_ms > 0) {
    return CheckSloDeadline(model, request, now, only_by_margin);
  }
  const double running_us = model.cost.BatchUs(model.config.max_batch_size);
  double earliest_free_us = -1;
  for (size_t i : model.slots) {
    const WorkerSlot& slot = *workers_[i];
    if (slot.state() != SlotState::kReady) continue;
    const double free_us = std::max(0.0, Backlog(model, slot) - running_us);
    if (earliest_free_us < 0 || free_us < earliest_free_us) earliest_free_us = free_us;
  }
  if (earliest_free_us < 0) return Status::Ok();  // no serving worker: max_queue_wait_ms rules
  const TimePoint start = now + Micros(static_cast<int64_t>(earliest_free_us));
  if (start <= request.deadline) return Status::Ok();
  return Status(StatusCode::kDeadlineExceeded,
                std::string(DeadlineName(request)) + " of " +
                    std::to_string(ToMicros(request.deadline - request.received) / 1000) +
                    " ms cannot be met: every worker of model '" + model.config.name +
                    "' is busy for at least " +
                    std::to_string(static_cast<int64_t>(earliest_free_us / 1000)) +
                    " ms more (measured batch cost); refused at once instead of left to expire");
}

Status Dispatcher::CheckSloDeadline(const ServedModel& model, const PendingRequest& request,
                                    TimePoint now, bool* only_by_margin) const {
  double earliest_free_us = -1;
  int ready = 0;
  for (size_t i : model.slots) {
    const WorkerSlot& slot = *workers_[i];
    if (slot.state() != SlotState::kReady) continue;
    ++ready;
    const double free_us = SloBacklog(model, slot);
    if (earliest_free_us < 0 || free_us < earliest_free_us) earliest_free_us = free_us;
  }
  if (ready == 0) return Status::Ok();  // no serving worker: max_queue_wait_ms rules
  // In fair order: a light client's request is not behind a heavy client's backlog, so that
  // backlog does not refuse it (model_queue.h).
  const int64_t rows_ahead = model.queue.RowsAheadOf(request);
  const double finish_us =
      EstimatedFinishUs(SloCostOf(model), earliest_free_us, rows_ahead, ready, request.rows);
  const TimePoint finish = now + Micros(static_cast<int64_t>(finish_us));
  if (finish <= request.deadline) return Status::Ok();
  // Every term of the estimate scales with the margin: unscaled, would it have fit?
  if (only_by_margin) {
    *only_by_margin = now + Micros(static_cast<int64_t>(finish_us / model.slo_margin.factor())) <=
                      request.deadline;
  }
  return Status(
      StatusCode::kDeadlineExceeded,
      "would finish at ~" + std::to_string(ToMicros(finish - request.received) / 1000) +
          " ms, deadline " + std::to_string(ToMicros(request.deadline - request.received) / 1000) +
          " ms (" + DeadlineName(request) + " of model '" + model.config.name + "'; " +
          std::to_string(rows_ahead) + " rows queued ahead, measured batch cost); refused at once");
}

void Dispatcher::UpdateDispatchLead(ServedModel& model) {
  // Before the first measurement, a millisecond: enough for the loop to wake and hand it over.
  constexpr int64_t kMinLeadUs = 1'000;
  const int64_t batch_us =
      model.cost.known() ? static_cast<int64_t>(model.cost.BatchUs(model.config.max_batch_size))
                         : 0;
  model.queue.set_dispatch_lead(Micros(std::max(kMinLeadUs, batch_us)));
}

std::string Dispatcher::WorkerSummary(const ServedModel& model) const {
  std::map<std::string, int> states;
  for (size_t i : model.slots) ++states[SlotStateName(workers_[i]->state())];
  std::string out;
  for (const auto& [state, count] : states) {
    out += (out.empty() ? "" : ", ") + std::to_string(count) + " " + state;
  }
  return "workers: " + (out.empty() ? std::string("none") : out);
}

WorkerSlot* Dispatcher::PickSlot(const ServedModel& model) {
  WorkerSlot* best = nullptr;
  double best_backlog = 0;
  for (size_t i : model.slots) {
    WorkerSlot* slot = workers_[i];
    if (!slot->CanAccept()) continue;
    double backlog = Backlog(model, *slot);
    if (!best || backlog < best_backlog) {
      best = slot;
      best_backlog = backlog;
    }
  }
  return best;
}

double Dispatcher::Backlog(const ServedModel& model, const WorkerSlot& slot) const {
  // Before the first measurement every row costs the same.
  return model.cost.known() ? model.cost.fixed_us() * static_cast<double>(slot.inflight()) +
                                  model.cost.per_row_us() * static_cast<double>(slot.inflight_rows())
                            : static_cast<double>(slot.inflight_rows());
}

int64_t Dispatcher::BatchRowsFor(const ServedModel& model, const WorkerSlot& chosen) const {
  // One row, or one worker: nothing to split, and PlanBatchRows would say the whole queue (up to
  // a batch). Answered without the cost model's fit, as most turns at low load are (issue 36).
  if (model.queue.queued_rows() <= 1 || model.slots.size() < 2) {
    return WholeBatchRows(model.queue.queued_rows(), model.config.max_batch_size);
  }
  SplitInputs& in = split_inputs_;  // reused: its worker list keeps its memory
  in.workers.clear();
  in.chosen = 0;
  in.queued_rows = model.queue.queued_rows();
  in.max_batch_rows = model.config.max_batch_size;
  in.fixed_us = model.cost.known() ? model.cost.fixed_us() : 0;
  in.per_row_us = model.cost.known() ? model.cost.per_row_us() : 1;
  in.dispatch_us = dispatch_us_;
  for (size_t i : model.slots) {
    const WorkerSlot& slot = *workers_[i];
    if (&slot == &chosen) in.chosen = in.workers.size();
    in.workers.push_back({Backlog(model, slot), slot.CanAccept()});
  }
  return PlanBatchRows(in);
}

void Dispatcher::DispatchAll() {
  for (auto& model : models_) {
    while (!model.queue.empty()) {
      WorkerSlot* slot = PickSlot(model);
      if (!slot) break;
      const TimePoint now = clock_.Now();
      // With a latency objective, what this worker would finish too late is answered now, and
      // the batch is sized so its head makes it.
      const int64_t slo_rows = ShedLateHeads(model, *slot, now);
      if (model.queue.empty()) break;
      // Work-conserving: a due queue is split over the workers that can take it when that
      // finishes it sooner (supervisor/dispatch/dispatch_planner.h).
      std::vector<HeldRequest> requests =
          model.queue.TakeBatch(now, std::min(BatchRowsFor(model, *slot), slo_rows));
      if (requests.empty()) break;
      FailShrunkRegions(model, &requests);
      if (requests.empty()) continue;
      InflightBatch batch;
      batch.batch_id = next_batch_id_++;
      for (const auto& r : requests) batch.rows += r->rows;
      batch.requests = std::move(requests);
      batch.dispatched = now;
      if (!slot->Dispatch(batch, options_.shm_in_place)) {
        TF_LOG(kError) << "worker ring refused a batch it had room for; requeued"
                       << Kv("worker", slot->id()) << Kv("batch", batch.batch_id);
        model.queue.PushFront(std::move(batch.requests));
        break;
      }
      if (slot->last_dispatch_in_place()) ++shm_in_place_batches_;
      dispatch_us_ += 0.05 * (static_cast<double>(ToMicros(clock_.Now() - now)) - dispatch_us_);
    }
  }
}

void Dispatcher::FailShrunkRegions(ServedModel& model, std::vector<HeldRequest>* requests) {
  auto shrunk = [&](HeldRequest& held) {
    PendingRequest& r = *held;
    if (r.input_regions.empty() && !r.output_region) return false;
    Status s = CheckRegionsIntact(r);
    if (s.ok()) return false;
    Fail(model, r, s);
    return true;
  };
  requests->erase(std::remove_if(requests->begin(), requests->end(), shrunk), requests->end());
}

void Dispatcher::Requeue(InflightBatch& batch, size_t model_index, const std::string& cause,
                         bool was_running) {
  ServedModel& model = models_[model_index];
  std::vector<HeldRequest> retry;
  for (auto& held : batch.requests) {
    PendingRequest& r = *held;
    if (was_running) {
      // Each request of a batch that killed its worker runs alone from now on, so a poison
      // request fails by itself and its batch-mates succeed.
      ++r.attempts;
      r.batchable = false;
    }
    if (r.attempts > options_.max_retries) {
      Fail(model, r, Internal("worker crashed while running this request (" + cause + "); tried " +
                             std::to_string(r.attempts) + " times"));
    } else {
      retry.push_back(std::move(held));
    }
  }
  model.queue.PushFront(std::move(retry));
}

}  // namespace torchfarm
