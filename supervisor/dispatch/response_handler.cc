#include "supervisor/dispatch/response_handler.h"

#include <iterator>

#include "common/log.h"
#include "common/protocol.h"
#include "ipc/slot_codec.h"
#include "supervisor/dispatch/model_metadata.h"
#include "supervisor/workers/batch_encoder.h"

namespace torchfarm {

namespace {

// A reply pinned this long while the pins cost its worker in-flight capacity: its client is not
// reading. The slot's bytes are moved out from under the message (PinnedResponseRing::
// DetachStuck) so the worker gets the slot back; a copy of one slot, so soon is cheap.
constexpr Millis kStuckReplyLimit{50};
// Only if that fails: the worker is replaced on a fresh segment (the old one stays mapped until
// libzmq lets go of the reply).
constexpr Millis kStuckReplyRestartLimit{2'000};

// The first failed item (worker/pipeline_stages.h: a corrupt image) among rows
// [first_row, first_row + rows) of a batch, as that request's error: OK when none failed.
Status RowFailureOf(const ipc::ResponseView& view, int64_t first_row, int64_t rows) {
  for (const ipc::RowFailure& failure : view.pipeline.row_failures) {
    if (failure.row < first_row || failure.row >= first_row + rows) continue;
    return Status(failure.status.code(), "inputs[0] item " +
                                             std::to_string(failure.row - first_row) + ": " +
                                             failure.status.message());
  }
  return Status::Ok();
}

void RecordPipelineMetrics(MetricsExporter& metrics, const ModelConfig& model,
                           const StageTimes& timing) {
  const std::pair<const char*, int64_t> stages[] = {{"decode", timing.decode_us},
                                                    {"preprocess", timing.preprocess_us},
                                                    {"postprocess", timing.postprocess_us}};
  for (const auto& [stage, micros] : stages) {
    if (micros >= 0) metrics.PipelineStage(model.name, model.version, stage, micros * 1e-6);
  }
}

}  // namespace

void ResponseHandler::Collect(WorkerSlot& slot) {
  slot.CollectResponses(clock_, [&](InflightBatch& batch, const uint8_t* response) {
    return Reply(slot, batch, response);
  });
}

double ResponseHandler::ServiceUs(const WorkerSlot& slot, const InflightBatch& batch,
                                  TimePoint now) {
  // Slots are erased after an unload (ModelControl::ReclaimRemoved) and their addresses reused:
  // an answer older than any batch still out can no longer matter, so the map is swept of them
  // whenever it grows past a bound, and stays the size of the live pool.
  if (last_answer_.size() >= kMaxLastAnswers) {
    for (auto it = last_answer_.begin(); it != last_answer_.end();) {
      it = now - it->second > kLastAnswerRelevance ? last_answer_.erase(it) : std::next(it);
    }
  }
  TimePoint& last = last_answer_[&slot];
  const TimePoint started = std::max(batch.dispatched, last);
  last = now;
  return static_cast<double>(ToMicros(now - started));
}

std::optional<ipc::ProtocolViolation> ResponseHandler::Reply(WorkerSlot& slot, InflightBatch& batch,
                                                             const uint8_t* response) {
  ServedModel& model = models_[slot.model_index()];
  TimePoint now = clock_.Now();
  // The segment's own capacity: a reload may have changed slot_bytes for the next launch.
  ipc::ResponseView& view = view_;  // reused: its vectors keep their memory
  const Status failure = ipc::ReadResponse(
      response, ExpectedResponse(batch, slot.responses()->segment().data_capacity()), &view);
  if (view.violation) {
    // The worker's fault, not the batch's: the batch goes back to be run again (poison rules).
    return ipc::ProtocolViolation{"response slot header", failure.message(),
                                  "the layout ipc/slot_codec.h ReadResponse checks"};
  }
  slot.batches_done++;
  slot.rows_done += static_cast<uint64_t>(batch.rows);
  slot.requests_done += batch.requests.size();
  model.stats.RecordBatch(batch.rows);
  if (failure.ok()) {
    model.cost.Observe(batch.rows, static_cast<double>(view.compute_us));
    model.service.Observe(batch.rows, ServiceUs(slot, batch, now));
    Dispatcher::UpdateDispatchLead(model);
  }
  if (metrics_) metrics_->Batch(model.config.name, model.config.version, batch.rows);
  if (!failure.ok() && failure.code() == StatusCode::kInvalidArgument &&
      batch.requests.size() > 1) {
    // One request's input failed the whole batch (more than ipc::kMaxRowErrors bad items, items
    // that do not stack, a model that throws on it): each request runs again alone, so only the
    // one at fault fails and its batch-mates, other clients' requests among them, succeed.
    for (auto& r : batch.requests) r->batchable = false;
    model.queue.PushFront(std::move(batch.requests));
    return std::nullopt;
  }
  if (!failure.ok()) {
    for (auto& r : batch.requests) {
      dispatcher_.Fail(model, *r, failure);
    }
    return std::nullopt;
  }
  // model_metadata.h: once per model file; not from a pipeline batch whose every row failed (it
  // answers no outputs at all).
  if (!view.outputs.empty() || view.pipeline.row_failures.empty()) {
    LearnOutputs(&model, view.outputs);
  }
  const bool may_pin = slot.CanPinResponse();
  int64_t row_start = 0;
  for (auto& held : batch.requests) {
    PendingRequest& r = *held;
    BatchShare share;
    share.view = &view;
    // The last share takes the specs themselves: OutputRows needs only the offsets and sizes.
    if (&held == &batch.requests.back()) {
      share.outputs = std::move(view.outputs);
    } else {
      share.outputs = view.outputs;
    }
    share.output_names = &model.config.output_names;
    share.first_row = row_start;
    share.batched = batch.requests.size() > 1;
    // The worker wrote the outputs into the client's region itself (ipc/slot_codec.h, in place).
    share.outputs_in_place = batch.outputs_in_place;
    share.ring = slot.responses();
    share.may_pin = may_pin;
    share.worker_id = slot.id();
    share.timing.queue_us = ToMicros(batch.dispatched - r.received);
    share.timing.compute_us = static_cast<int64_t>(view.compute_us);
    share.timing.total_us = ToMicros(now - r.received);
    if (view.has_pipeline) {
      share.timing.decode_us = view.pipeline.decode_us;
      share.timing.preprocess_us = view.pipeline.preprocess_us;
      share.timing.postprocess_us = view.pipeline.postprocess_us;
    }
    const Status item_failure = RowFailureOf(view, row_start, r.rows);
    row_start += r.rows;
    if (!item_failure.ok()) {
      dispatcher_.Fail(model, r, item_failure);
      continue;
    }
    const StageTimes timing = share.timing;
    if (Status s = replies_.SendOutputs(r, std::move(share)); !s.ok()) {
      dispatcher_.Fail(model, r, s);
      continue;
    }
    model.stats.RecordOk(timing.queue_us, timing.compute_us, timing.total_us, now);
    if (model.config.latency_slo_ms > 0)
      Dispatcher::RecordSloOutcome(model, Dispatcher::AnsweredWithinSlo(model.config, r, now), now);
    if (view.has_pipeline) model.stats.RecordStages(timing, now);
    if (metrics_) {
      metrics_->RequestDone(model.config.name, model.config.version, StatusCode::kOk, r.origin);
      metrics_->Latency(model.config.name, model.config.version, timing.queue_us * 1e-6,
                        timing.compute_us * 1e-6, timing.total_us * 1e-6);
      RecordPipelineMetrics(*metrics_, model.config, timing);
    }
  }
  return std::nullopt;
}

void ResponseHandler::ReleasePinned(WorkerPool& workers, PinnedRingKeeper& rings, TimePoint now) {
  rings.ReleaseFreed();
  if (now >= next_backlog_sweep_) {
    replies_.backlog().Sweep();
    next_backlog_sweep_ = now + Millis(1'000);
  }
  for (auto& slot : workers) {
    if (slot->state() != SlotState::kReady || slot->restart_requested() || slot->retiring() ||
        !slot->ResponsesStuck(now, kStuckReplyLimit)) {
      continue;
    }
    if (slot->responses()->DetachStuck(now, kStuckReplyLimit)) {
      ++detached_replies_;
      slot->responses()->ReleaseFreed();
      continue;
    }
    if (!slot->ResponsesStuck(now, kStuckReplyRestartLimit)) continue;
    // The ring is in-order: a reply its client does not read keeps every later slot from going
    // back to the worker. Copying no longer helps; a fresh segment does.
    TF_LOG(kWarn) << "a client stopped reading a zero-copy reply; replacing the worker on a fresh "
                     "segment"
                  << Kv("worker", slot->id()) << Kv("pid", slot->pid())
                  << Kv("pinned_slots", slot->responses()->unpopped());
    slot->BeginGracefulRestart("a client stopped reading a zero-copy reply");
  }
}

}  // namespace torchfarm
