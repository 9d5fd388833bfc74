// The farm's own lifecycle: one phase and its deadline, moved only by StepFarm, a pure function
// of (state, event, what the loop observed, now). The supervisor's loop thread owns the state and
// carries out the step's actions; this file decides, it never touches a socket or a process.
//
//              admin "drain"
//   kServing ----------------> kAdminDrained   (stays up, not ready, refuses new requests)
//      |                            |
//      | SIGTERM/SIGINT             | SIGTERM/SIGINT
//      v                            v
//   kDraining  <--------------------+          deadline = now + drain_timeout_ms
//      |  (a second signal: deadline = now, the rest of the drain is skipped)
//      |  queue and workers idle, or the drain deadline passed:
//      |  fail what is still queued, send every worker "stop"
//      v
//   kStoppingWorkers                           deadline = now + stop grace
//      |  (the grace passed: SIGKILL the rest, deadline = now + stop grace again)
//      |  every worker exited
//      v
//   kDone                                      the loop returns
#pragma once

#include "common/clock.h"

namespace torchfarm {

enum class FarmPhase { kServing, kAdminDrained, kDraining, kStoppingWorkers, kDone };

const char* FarmPhaseName(FarmPhase phase);

enum class FarmEvent {
  kStopSignal,  // SIGTERM or SIGINT
  kAdminDrain,  // the admin socket's "drain"
  kTurn,        // one loop turn: the drain's and the stop's progress
};

struct FarmState {
  FarmPhase phase = FarmPhase::kServing;
  // kDraining: when the drain gives up waiting; kStoppingWorkers: when the rest are killed.
  TimePoint deadline{};
};

// What the loop saw this turn (read only on kTurn).
struct FarmObservation {
  bool idle = false;            // every queue empty and no batch in flight
  bool workers_exited = false;  // no worker process left
};

struct FarmTimeouts {
  Millis drain{30'000};      // drain_timeout_ms
  Millis stop_grace{5'000};  // after "stop", before SIGKILL
};

// What the loop carries out after a step, in this order.
struct FarmActions {
  bool notify_stopping = false;  // sd_notify STOPPING=1 (once per farm)
  bool fail_queued = false;      // answer every queued request UNAVAILABLE
  bool stop_workers = false;     // send every worker "stop"
  bool kill_workers = false;     // SIGKILL every worker still alive
  // For the log: what the step did ("" when nothing changed).
  const char* what = "";
};

struct FarmStep {
  FarmState next;
  FarmActions actions;
};

FarmStep StepFarm(const FarmState& state, FarmEvent event, const FarmObservation& seen,
                  TimePoint now, const FarmTimeouts& timeouts);

// New requests and model loads are refused from the first drain on.
inline bool IsDraining(FarmPhase phase) { return phase != FarmPhase::kServing; }
// Workers are being stopped: no restarts, no spares, orphaned batches fail instead of requeueing.
inline bool IsStoppingWorkers(FarmPhase phase) {
  return phase == FarmPhase::kStoppingWorkers || phase == FarmPhase::kDone;
}
// The deadline the loop must wake for, if the phase has one (an admin drain has none).
inline bool HasDeadline(FarmPhase phase) {
  return phase == FarmPhase::kDraining || phase == FarmPhase::kStoppingWorkers;
}

}  // namespace torchfarm
