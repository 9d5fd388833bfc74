// The table of worker slots and the duties that keep its processes alive: launch, restart when
// due, kill the hung, silent or unstoppable, and stop them all. A slot's index is its worker id
// and never changes (retired slots stay, stopped).
//
// Owns: every WorkerSlot, and what all their launches share (LaunchContext) and the restart
// policy. Runs on the supervisor's loop thread. Reaping (SIGCHLD) stays with the Supervisor, which
// requeues the batches a dead worker held; the pool finds the slot (FindByPid).
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "supervisor/loop/event_ring.h"
#include "supervisor/workers/restart_policy.h"
#include "supervisor/workers/worker_slot.h"

namespace torchfarm {

class WorkerPool {
 public:
  using Slots = std::vector<std::unique_ptr<WorkerSlot>>;
  // The hang_timeout_ms of the model a slot serves.
  using HangLimit = std::function<Millis(const WorkerSlot&)>;

  // Asked before each launch; a refusal (not OK) fails the slot instead (WorkerSlot::RefuseLaunch).
  using LaunchCheck = std::function<Status(const WorkerSlot&)>;

  explicit WorkerPool(const TimeSource& clock) : clock_(clock) {}

  void Configure(LaunchContext context, RestartPolicy policy);
  void set_policy(RestartPolicy policy) { policy_ = std::move(policy); }
  // Applies to the next launches (heartbeat_ms after a reload).
  void set_heartbeat_ms(int heartbeat_ms) { context_.heartbeat_ms = heartbeat_ms; }
  const RestartPolicy& policy() const { return policy_; }
  void set_launch_check(LaunchCheck check) { launch_check_ = std::move(check); }
  // The farm's event ring (the dashboard): restarts and kills are noted there. Null: none.
  void set_events(EventRing* events) { events_ = events; }
  EventRing* events() const { return events_; }

  // Adds a slot (not launched); returns its index. Its id is new for the farm's life (ids of
  // erased slots are not reused).
  size_t Add(const ModelConfig& model, const InstanceConfig& instance, size_t model_index);
  // At most this many launches per loop turn: each costs the loop a segment, a fork round trip
  // and a few milliseconds, so a scale-up of hundreds of workers is spread over many turns and
  // admin commands, signals and jobs keep being served while they start.
  static constexpr int kMaxLaunchesPerTurn = 4;
  // Launches one slot, or (beyond this turn's kMaxLaunchesPerTurn) defers it to a coming turn;
  // a failure backs the slot off (restart_policy.h) and is logged.
  void Launch(WorkerSlot& slot);
  // Starts a new turn's launch budget, then launches the slots whose backoff, failed cool-down
  // or deferral is over, within it.
  void LaunchDue();
  // SIGKILLs workers silent past their heartbeats, running one batch past hang_timeout_ms, or
  // still alive kStopGrace after being asked to stop. Their exits arrive through SIGCHLD.
  void KillUnresponsive(const HangLimit& hang_limit);
  // The earliest liveness, stop or (unless `restarts_paused`) restart deadline of any slot.
  TimePoint NextDeadline(const HangLimit& hang_limit, bool restarts_paused) const;
  static Clock::duration HeartbeatLimit(const WorkerSlot& slot);

  // Asks a slot to finish its batches and stop for good (retire), logging why.
  static void Retire(WorkerSlot& slot, const std::string& why);
  // The admin "restart" command: a starting or ready worker is replaced once its batches are
  // done. Errors name what was asked and why it cannot be.
  Status RequestRestart(int worker_id, const std::string& why);

  // Erases the slots with erase[i] (an unload's retired, stopped slots: EraseSlots is told only of
  // those) and returns where each old index went: kErased for the erased.
  static constexpr size_t kErased = static_cast<size_t>(-1);
  std::vector<size_t> EraseSlots(const std::vector<bool>& erase);

  WorkerSlot* FindByPid(pid_t pid);
  WorkerSlot* FindByRoutingId(const std::string& routing_id);
  bool AllExited() const;
  void KillAll();
  // Workers killed for breaking the shared-memory protocol, over the farm's life (counted at their
  // exit; WorkerSlot::OnProtocolViolation).
  void CountProtocolViolation() { ++protocol_violations_; }
  uint64_t protocol_violations() const { return protocol_violations_; }

  WorkerSlot* operator[](size_t index) const { return slots_[index].get(); }
  WorkerSlot* back() const { return slots_.back().get(); }
  size_t size() const { return slots_.size(); }
  Slots::const_iterator begin() const { return slots_.begin(); }
  Slots::const_iterator end() const { return slots_.end(); }

 private:
  const TimeSource& clock_;
  LaunchContext context_;
  RestartPolicy policy_;
  Slots slots_;
  int launches_this_turn_ = 0;
  int next_id_ = 0;
  EventRing* events_ = nullptr;
  LaunchCheck launch_check_;  // ids are unique over the farm's life, also after EraseSlots
  uint64_t protocol_violations_ = 0;
};

}  // namespace torchfarm
