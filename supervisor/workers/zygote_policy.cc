#include "supervisor/workers/zygote_policy.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>

#include "supervisor/workers/process_launcher.h"

namespace torchfarm {

namespace {

// The signals someone sends on purpose; a zygote's own crash is SIGSEGV, SIGABRT, SIGBUS...
bool KilledBySender(int wait_status) {
  if (!WIFSIGNALED(wait_status)) return false;
  switch (WTERMSIG(wait_status)) {
    case SIGKILL:
    case SIGTERM:
    case SIGINT:
    case SIGHUP:
    case SIGQUIT:
      return true;
    default:
      return false;
  }
}

Millis Doubled(Millis backoff) { return std::min(backoff * 2, kZygoteMaxBackoff); }

std::string Ms(Millis d) { return std::to_string(d.count()) + " ms"; }

}  // namespace

const char* ZygoteRoleName(ZygoteRole role) {
  return role == ZygoteRole::kPrimary ? "primary" : "standby";
}

const char* ZygoteStateName(ZygoteState state) {
  switch (state) {
    case ZygoteState::kDown:
      return "down";
    case ZygoteState::kStarting:
      return "starting";
    case ZygoteState::kReady:
      return "ready";
    case ZygoteState::kStopping:
      return "stopping";
  }
  return "unknown";
}

bool ZygoteTransitionAllowed(ZygoteState from, ZygoteState to) {
  if (from == to) return true;
  switch (to) {
    case ZygoteState::kStarting:
      return from == ZygoteState::kDown;
    case ZygoteState::kReady:
      return from == ZygoteState::kStarting;
    case ZygoteState::kStopping:
      return from == ZygoteState::kStarting || from == ZygoteState::kReady;
    case ZygoteState::kDown:
      return true;  // a reaped exit, from any state that had a process
  }
  return false;
}

ZygoteRestart DecideZygoteRestart(const ZygoteExitFacts& exit, Millis backoff, TimePoint now) {
  const bool from_outside = !exit.killed_by_us && KilledBySender(exit.wait_status);
  const std::string cause = DescribeWaitStatus(exit.wait_status);
  if (exit.was_ready && from_outside) {
    return {now, kZygoteInitialBackoff, "a ready zygote " + cause + " from outside: at once"};
  }
  if (exit.was_ready) {
    return {now + kZygoteInitialBackoff, kZygoteInitialBackoff,
            "a ready zygote " + cause + (exit.killed_by_us ? " (stuck)" : "") + ": after " +
                Ms(kZygoteInitialBackoff)};
  }
  if (from_outside && exit.forked) {
    return {now, backoff, "forked, not ready yet, " + cause + " from outside: at once"};
  }
  if (from_outside) {
    return {now + backoff, backoff,
            "not ready yet, " + cause + " from outside: after " + Ms(backoff)};
  }
  return {now + backoff, Doubled(backoff),
          "died before ready (" + cause + (exit.killed_by_us ? ", not ready in time" : "") +
              "): after " + Ms(backoff) + ", next " + Ms(Doubled(backoff))};
}

ZygoteRestart DecideZygoteStartFailure(bool parent_lost, Millis backoff, TimePoint now) {
  if (parent_lost) return {now, backoff, "its parent zygote was lost mid-fork: again at once"};
  return {now + backoff, Doubled(backoff),
          "could not start: after " + Ms(backoff) + ", next " + Ms(Doubled(backoff))};
}

ZygoteStartPlan PlanZygoteStart(ZygoteRole role, TimePoint now, TimePoint restart_at,
                                ZygoteState other) {
  const char* other_name =
      ZygoteRoleName(role == ZygoteRole::kPrimary ? ZygoteRole::kStandby : ZygoteRole::kPrimary);
  if (now < restart_at) return {ZygoteStartHow::kWait, "backing off"};
  if (other == ZygoteState::kReady) {
    return {ZygoteStartHow::kFork, std::string("forked from the ready ") + other_name};
  }
  if (role == ZygoteRole::kStandby) {
    return {ZygoteStartHow::kWait, std::string("the standby forks from a ready zygote; the ") +
                                       other_name + " is " + ZygoteStateName(other)};
  }
  if (other == ZygoteState::kStarting) {
    return {ZygoteStartHow::kWait, std::string("the ") + other_name + " is starting"};
  }
  return {ZygoteStartHow::kExec, std::string("no zygote to fork from (the ") + other_name + " is " +
                                     ZygoteStateName(other) + "): exec"};
}

}  // namespace torchfarm
