// Supervisor, the worker side: control messages, child exits, liveness and hang checks,
// restarts and GPU-to-CPU fallback.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/protocol.h"
#include "ipc/control_protocol.h"
#include "supervisor/job_intake.h"
#include "supervisor/supervisor.h"
#include "supervisor/zmq_util.h"

namespace torchfarm {

using nlohmann::json;

void Supervisor::OnChildExit(pid_t pid, int wait_status) {
  for (auto& slot : slots_) {
    if (slot->pid() != pid) continue;
    bool expected = stopping_workers_ || slot->state() == SlotState::kStopping;
    HandleWorkerOutput(*slot);  // what it printed last (a crash message) comes first
    auto orphans = slot->OnExit(wait_status, clock_.Now(), options_.restart, stopping_workers_);
    TF_LOG_AT(expected ? LogLevel::kInfo : LogLevel::kWarn) << "worker exited" << Kv("worker", slot->id())
                                     << Kv("pid", pid) << Kv("model", slot->model_name())
                                     << Kv("cause", slot->last_exit())
                                     << Kv("inflight_batches", orphans.size());
    // Only the oldest batch was running; the ones behind it in the ring never started.
    for (size_t i = 0; i < orphans.size(); ++i) {
      Requeue(orphans[i], slot->model_index(), slot->last_exit(), i == 0);
    }
    if (metrics_ && slot->state() == SlotState::kBackoff && !expected) {
      metrics_->WorkerRestart(slot->model_name());
    }
    FailModelIfNoWorkers(models_[slot->model_index()]);
    return;
  }
}

void Supervisor::FailModelIfNoWorkers(Model& model) {
  if (ModelAvailable(model)) return;
  std::string reason;
  for (size_t i : model.slots) {
    if (!slots_[i]->failure_reason().empty()) reason = slots_[i]->failure_reason();
  }
  Status status = Unavailable("model '" + model.config.name + "' has no live worker: " +
                              (reason.empty() ? "all workers failed" : reason));
  for (auto& r : model.queue.TakeAll()) {
    FailRequest(model, r, status);
  }
}

bool Supervisor::ModelAvailable(const Model& model) const {
  for (size_t i : model.slots) {
    SlotState s = slots_[i]->state();
    if (s == SlotState::kStarting || s == SlotState::kReady || s == SlotState::kBackoff) return true;
  }
  return false;
}

void Supervisor::HandleControl() {
  std::vector<zmq::message_t> frames;
  for (int n = 0; n < kMaxMessagesPerTurn && ReceiveMultipart(control_, &frames); ++n) {
    if (frames.size() != 2) continue;
    std::string routing = frames[0].to_string();
    WorkerSlot* slot = FindSlotByRoutingId(routing);
    json message = json::parse(frames[1].to_string_view(), nullptr, false);
    if (!slot || !message.is_object()) {
      TF_LOG(kDebug) << "control message from an unknown or stale worker dropped" << Kv("from", routing);
      continue;
    }
    TimePoint now = clock_.Now();
    slot->OnMessage(now);
    std::string type = message.value("type", "");
    if (type == ipc::kMsgHeartbeat) {
      control_.send(zmq::buffer(routing), zmq::send_flags::sndmore);
      control_.send(zmq::str_buffer(R"({"type":"ack"})"), zmq::send_flags::none);
    } else if (type == ipc::kMsgHello) {
      slot->OnHello(now);
      int version = message.value("layout_version", 0);
      if (version != static_cast<int>(ipc::kLayoutVersion)) {
        TF_LOG(kError) << "worker speaks another shared-memory layout; killing it"
                       << Kv("worker", slot->id()) << Kv("worker_layout", version)
                       << Kv("supervisor_layout", ipc::kLayoutVersion);
        ::kill(slot->pid(), SIGKILL);
      }
    } else if (type == ipc::kMsgReady && slot->state() == SlotState::kStarting) {
      slot->OnReady(now, message.value("load_ms", 0.0));
    } else if (type == ipc::kMsgError) {
      std::string reason = message.value("message", "unknown error");
      TF_LOG(kError) << "worker reported an error" << Kv("worker", slot->id())
                     << Kv("model", slot->model_name()) << Kv("error", reason);
      if (message.value("fatal", false)) {
        slot->OnFatalError(reason, message.value("kind", "internal"), now);
      }
    }
  }
}

WorkerSlot* Supervisor::FindSlotByRoutingId(const std::string& routing_id) {
  for (auto& slot : slots_) {
    if (slot->pid() > 0 && ipc::WorkerRoutingId(slot->id(), slot->generation()) == routing_id) {
      return slot.get();
    }
  }
  return nullptr;
}

void Supervisor::CheckWorkerLiveness() {
  TimePoint now = clock_.Now();
  auto heartbeat_limit = Millis(config_.heartbeat_ms) * ipc::kLivenessHeartbeats;
  for (auto& slot : slots_) {
    std::string why;
    Millis hang_limit(models_[slot->model_index()].config.hang_timeout_ms);
    if (slot->LivenessExpired(now, heartbeat_limit)) {
      why = "no heartbeat for " + std::to_string(ToMicros(now - slot->last_heard()) / 1000) + " ms";
    } else if (slot->HangExpired(now, hang_limit)) {
      why = "batch ran longer than hang_timeout_ms (" + std::to_string(hang_limit.count()) + " ms)";
    } else {
      continue;
    }
    TF_LOG(kWarn) << "worker hung; killing it" << Kv("worker", slot->id()) << Kv("pid", slot->pid())
                  << Kv("why", why);
    slot->NoteKill("worker hung: " + why);
    ::kill(slot->pid(), SIGKILL);
    slot->OnMessage(now);  // one kill per silence; the exit arrives through SIGCHLD
  }
}

void Supervisor::RestartDueSlots() {
  if (draining_) return;
  TimePoint now = clock_.Now();
  for (auto& slot : slots_) {
    if (slot->RestartDue(now)) LaunchSlot(*slot);
  }
}

void Supervisor::LaunchSlot(WorkerSlot& slot) {
  Status s = slot.Launch(launch_, clock_.Now());
  if (!s.ok()) {
    slot.set_failure_reason(s.message());
    slot.TransitionTo(SlotState::kFailed, s.message());
    FailModelIfNoWorkers(models_[slot.model_index()]);
  }
}

}  // namespace torchfarm
