#include "supervisor/loop/farm_phase.h"

namespace torchfarm {

const char* FarmPhaseName(FarmPhase phase) {
  switch (phase) {
    case FarmPhase::kServing:
      return "serving";
    case FarmPhase::kAdminDrained:
      return "drained";
    case FarmPhase::kDraining:
      return "draining";
    case FarmPhase::kStoppingWorkers:
      return "stopping workers";
    case FarmPhase::kDone:
      return "done";
  }
  return "unknown";
}

namespace {

FarmStep OnStopSignal(const FarmState& state, TimePoint now, const FarmTimeouts& timeouts) {
  FarmStep step{state, {}};
  switch (state.phase) {
    case FarmPhase::kServing:
    case FarmPhase::kAdminDrained:
      step.next = {FarmPhase::kDraining, now + timeouts.drain};
      // An admin drain told systemd already.
      step.actions.notify_stopping = state.phase == FarmPhase::kServing;
      step.actions.what = "stop signal: draining";
      break;
    case FarmPhase::kDraining:
      step.next.deadline = now;  // the next turn stops the workers
      step.actions.what = "second stop signal: skipping the rest of the drain";
      break;
    case FarmPhase::kStoppingWorkers:
    case FarmPhase::kDone:
      break;  // already on its way out
  }
  return step;
}

FarmStep OnTurn(const FarmState& state, const FarmObservation& seen, TimePoint now,
                const FarmTimeouts& timeouts) {
  FarmStep step{state, {}};
  if (state.phase == FarmPhase::kDraining) {
    if (!seen.idle && now < state.deadline) return step;
    step.next = {FarmPhase::kStoppingWorkers, now + timeouts.stop_grace};
    step.actions.fail_queued = true;
    step.actions.stop_workers = true;
    step.actions.what = seen.idle ? "drained: stopping the workers"
                                  : "drain timeout: failing what is queued, stopping the workers";
  } else if (state.phase == FarmPhase::kStoppingWorkers) {
    if (seen.workers_exited) {
      step.next = {FarmPhase::kDone, state.deadline};
      step.actions.what = "every worker exited";
    } else if (now >= state.deadline) {
      step.next.deadline = now + timeouts.stop_grace;
      step.actions.kill_workers = true;
      step.actions.what = "workers did not stop in time: killing them";
    }
  }
  return step;
}

}  // namespace

FarmStep StepFarm(const FarmState& state, FarmEvent event, const FarmObservation& seen,
                  TimePoint now, const FarmTimeouts& timeouts) {
  switch (event) {
    case FarmEvent::kStopSignal:
      return OnStopSignal(state, now, timeouts);
    case FarmEvent::kAdminDrain:
      if (state.phase != FarmPhase::kServing) return {state, {}};
      return {{FarmPhase::kAdminDrained, {}}, {true, false, false, false, "drain requested"}};
    case FarmEvent::kTurn:
      return OnTurn(state, seen, now, timeouts);
  }
  return {state, {}};
}

}  // namespace torchfarm
