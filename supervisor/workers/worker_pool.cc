#include "supervisor/workers/worker_pool.h"

#include <signal.h>

#include <algorithm>

#include "common/log.h"
#include "ipc/control_protocol.h"
#include "supervisor/loop/resource_errors.h"

namespace torchfarm {

void WorkerPool::Configure(LaunchContext context, RestartPolicy policy) {
  context_ = std::move(context);
  policy_ = std::move(policy);
}

size_t WorkerPool::Add(const ModelConfig& model, const InstanceConfig& instance,
                       size_t model_index) {
  slots_.push_back(std::make_unique<WorkerSlot>(next_id_++, model, instance, model_index));
  return slots_.size() - 1;
}

std::vector<size_t> WorkerPool::EraseSlots(const std::vector<bool>& erase) {
  std::vector<size_t> moved(slots_.size(), kErased);
  Slots kept;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (i < erase.size() && erase[i]) continue;
    moved[i] = kept.size();
    kept.push_back(std::move(slots_[i]));
  }
  slots_ = std::move(kept);
  return moved;
}

void WorkerPool::Launch(WorkerSlot& slot) {
  if (launches_this_turn_ >= kMaxLaunchesPerTurn &&
      (slot.state() == SlotState::kStopped || slot.state() == SlotState::kBackoff)) {
    slot.DeferLaunch(clock_.Now(), "launch paced: " + std::to_string(kMaxLaunchesPerTurn) +
                                       " launches this loop turn already");
    return;
  }
  ++launches_this_turn_;
  if (launch_check_) {
    if (Status refused = launch_check_(slot); !refused.ok()) {
      TF_LOG(kError) << "worker not launched" << Kv("worker", slot.id())
                     << Kv("model", slot.model_name()) << Kv("version", slot.model_version())
                     << Kv("why", refused.message());
      slot.RefuseLaunch(refused.message(), clock_.Now(), policy_);
      return;
    }
  }
  Status s = slot.Launch(context_, clock_.Now(), policy_);
  if (!s.ok()) {
    // The slot backs off and tries again: fork or descriptors running out is the machine's
    // state, not a reason to stop serving for good.
    TF_LOG(kError) << "cannot launch worker; will retry" << Kv("worker", slot.id())
                   << Kv("model", slot.model_name()) << Kv("error", s.message());
    ResourceErrors::Instance().Note("worker launch", s.message(), clock_.Now());
  }
}

void WorkerPool::Retire(WorkerSlot& slot, const std::string& why) {
  TF_LOG(kInfo) << "retiring worker" << Kv("worker", slot.id()) << Kv("model", slot.model_name())
                << Kv("why", why);
  slot.BeginRetire(why);
}

Status WorkerPool::RequestRestart(int worker_id, const std::string& why) {
  auto found = std::find_if(slots_.begin(), slots_.end(),
                            [&](const auto& slot) { return slot->id() == worker_id; });
  if (found == slots_.end() || (*found)->retiring()) {
    return NotFound("no worker " + std::to_string(worker_id) + " (see torchfarm stats)");
  }
  WorkerSlot& slot = **found;
  if (slot.state() != SlotState::kReady && slot.state() != SlotState::kStarting) {
    return Unavailable("worker " + std::to_string(worker_id) + " is " +
                       SlotStateName(slot.state()) +
                       "; only a starting or ready worker can be restarted");
  }
  slot.BeginGracefulRestart(why);
  return Status::Ok();
}

void WorkerPool::LaunchDue() {
  launches_this_turn_ = 0;
  const TimePoint now = clock_.Now();
  for (auto& slot : slots_) {
    if (launches_this_turn_ >= kMaxLaunchesPerTurn) break;  // the rest stay due: next turn
    if (!slot->RestartDue(now)) continue;
    const bool restart = slot->generation() >= 0;  // launched before: this is a restart
    Launch(*slot);
    if (restart && events_ && slot->pid() > 0) {
      events_->Add("restart",
                   "worker " + std::to_string(slot->id()) + " restarted as pid " +
                       std::to_string(slot->pid()) + " (restart " +
                       std::to_string(slot->restarts()) + ")",
                   slot->model_name(), slot->id());
    }
  }
}

Clock::duration WorkerPool::HeartbeatLimit(const WorkerSlot& slot) {
  // The interval the process was launched with: a reload changes only the next launch's.
  return slot.heartbeat() * ipc::kLivenessHeartbeats;
}

void WorkerPool::KillUnresponsive(const HangLimit& hang_limit) {
  const TimePoint now = clock_.Now();
  for (auto& slot : slots_) {
    std::string why;
    const Millis hang = hang_limit(*slot);
    if (slot->LivenessExpired(now, HeartbeatLimit(*slot))) {
      why = "no heartbeat for " + std::to_string(ToMicros(now - slot->last_heard()) / 1000) + " ms";
    } else if (slot->HangExpired(now, hang)) {
      why = "batch ran longer than hang_timeout_ms (" + std::to_string(hang.count()) + " ms)";
    } else if (slot->StopExpired(now)) {
      why = "did not stop within " + std::to_string(WorkerSlot::kStopGrace.count()) +
            " ms of being asked";
    } else {
      continue;
    }
    TF_LOG(kWarn) << "worker unresponsive; killing it" << Kv("worker", slot->id())
                  << Kv("pid", slot->pid()) << Kv("why", why);
    slot->NoteKill("worker hung: " + why);
    if (events_) {
      events_->Add("kill",
                   "worker " + std::to_string(slot->id()) + " pid " + std::to_string(slot->pid()) +
                       " killed: " + why,
                   slot->model_name(), slot->id());
    }
    ::kill(slot->pid(), SIGKILL);
    slot->OnKillSent(now);  // one kill per silence; the exit arrives through SIGCHLD
  }
}

TimePoint WorkerPool::NextDeadline(const HangLimit& hang_limit, bool restarts_paused) const {
  TimePoint next = TimePoint::max();
  for (const auto& slot : slots_) {
    // Paused restarts (a draining farm) would wake the loop for nothing, over and over.
    if (restarts_paused && slot->pid() <= 0) continue;
    next = std::min(next, slot->NextDeadline(HeartbeatLimit(*slot), hang_limit(*slot)));
  }
  return next;
}

WorkerSlot* WorkerPool::FindByPid(pid_t pid) {
  for (auto& slot : slots_) {
    if (slot->pid() == pid) return slot.get();
  }
  return nullptr;
}

WorkerSlot* WorkerPool::FindByRoutingId(const std::string& routing_id) {
  for (auto& slot : slots_) {
    if (slot->pid() > 0 && ipc::WorkerRoutingId(slot->id(), slot->generation()) == routing_id) {
      return slot.get();
    }
  }
  return nullptr;
}

bool WorkerPool::AllExited() const {
  return std::all_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->pid() <= 0; });
}

void WorkerPool::KillAll() {
  for (auto& slot : slots_) {
    if (slot->pid() > 0) ::kill(slot->pid(), SIGKILL);
  }
}

}  // namespace torchfarm
