// A worker's finished batches back to their clients: reads each response from the worker's ring
// (ipc/slot_codec.h, checked against what was asked), splits the batch's outputs per request,
// answers each through the ReplyWriter (zero-copy when the ring allows), and records stats,
// metrics and the model's measured batch cost and service time. A batch one request's input failed
// runs again as single requests, so only that request fails. Also gives zero-copy replies' ring
// slots back to their workers (ReleasePinned).
//
// Owns nothing; reads and updates the models' stats and queues. Loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "ipc/protocol_violation.h"
#include "supervisor/admin/metrics_exporter.h"
#include "supervisor/dispatch/dispatcher.h"
#include "supervisor/dispatch/reply_writer.h"
#include "supervisor/models/served_model.h"
#include "supervisor/workers/worker_pool.h"
#include "supervisor/workers/worker_slot.h"

namespace torchfarm {

class ResponseHandler {
 public:
  ResponseHandler(std::vector<ServedModel>& models, Dispatcher& dispatcher, ReplyWriter& replies,
                  const TimeSource& clock)
      : models_(models), dispatcher_(dispatcher), replies_(replies), clock_(clock) {}
  void set_metrics(MetricsExporter* metrics) { metrics_ = metrics; }

  // Answers every batch `slot`'s worker finished since the last call.
  void Collect(WorkerSlot& slot);
  // Each turn: frees ring slots of zero-copy replies libzmq let go of; a reply whose client does
  // not read it is copied out of its worker's ring after 50 ms, and if that cannot help, the
  // worker is replaced on a fresh segment after 2 s (the ring is in order).
  void ReleasePinned(WorkerPool& workers, PinnedRingKeeper& rings, TimePoint now);
  uint64_t detached_replies() const { return detached_replies_; }

 private:
  // Set when the response broke the slot layout: `batch` is left as it was, for requeueing.
  std::optional<ipc::ProtocolViolation> Reply(WorkerSlot& slot, InflightBatch& batch,
                                              const uint8_t* response);

  // A batch's service time: from when `slot` could start it to `now` (ServedModel::service).
  double ServiceUs(const WorkerSlot& slot, const InflightBatch& batch, TimePoint now);

  std::vector<ServedModel>& models_;
  Dispatcher& dispatcher_;
  ReplyWriter& replies_;
  const TimeSource& clock_;
  // Per worker slot, when its last answer arrived (ServiceUs). A slot that is gone leaves a time
  // older than any later batch's dispatch, which then counts instead.
  std::unordered_map<const WorkerSlot*, TimePoint> last_answer_;
  // Reply's, reused from one response to the next: its offsets and sizes keep their memory (its
  // outputs go to the batch's last share).
  ipc::ResponseView view_;
  static constexpr size_t kMaxLastAnswers = 1024;
  static constexpr Clock::duration kLastAnswerRelevance = std::chrono::minutes(1);
  MetricsExporter* metrics_ = nullptr;
  TimePoint next_backlog_sweep_{};
  uint64_t detached_replies_ = 0;  // pinned replies whose slot was copied out for their worker
};

}  // namespace torchfarm
