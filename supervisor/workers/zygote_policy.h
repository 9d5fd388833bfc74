// When and how the supervisor's zygotes (zygote_pool.h) start again: pure functions of what the
// pool knows and the time, so every branch is unit-tested on a fake clock without processes
// (tests/supervisor/zygote_policy_test.cc). Runs on the supervisor's loop thread.
//
// The rules (docs/operations.md, "Warm spares and worker start-up"):
//   Restart timing, after a zygote's exit (DecideZygoteRestart):
//     it was ready and was killed from outside (SIGKILL, SIGTERM, SIGINT, SIGHUP, SIGQUIT that the
//       supervisor did not send: an operator, the OOM killer, a chaos test)   at once; backoff
//       reset
//     it was ready and ended otherwise (a crash, or the supervisor killed it because it stopped
//       answering)                                                 after kInitialBackoff; reset
//     it died before ready, killed from outside: forked             at once (a fork costs
//                                                                  milliseconds)
//                                                exec'd             after the current backoff
//     it died before ready on its own, or was killed for not getting ready in time
//                                                                  after the current backoff,
//                                                                  which then doubles (to kMax)
//   A start that failed before a process existed (DecideZygoteStartFailure): a refused fork or a
//   failed exec waits the current backoff, which doubles; a fork whose parent zygote died or hung
//   mid-request is tried again at once (the parent's own exit is judged by its own place).
//   How a down place starts once due (PlanZygoteStart): fork from the other zygote when that one
//   is ready (milliseconds, pages shared copy-on-write); else the primary execs, unless the other
//   is already starting; the standby never execs (at most one LibTorch load at a time, one
//   backoff for a broken LibTorch).
#pragma once

#include <string>

#include "common/clock.h"

namespace torchfarm {

enum class ZygoteRole { kPrimary, kStandby };
const char* ZygoteRoleName(ZygoteRole role);

// A zygote place's states (zygote.h draws the cycle).
enum class ZygoteState { kDown, kStarting, kReady, kStopping };
const char* ZygoteStateName(ZygoteState state);
// Whether a place may go from -> to (a same-state change is always allowed).
bool ZygoteTransitionAllowed(ZygoteState from, ZygoteState to);

inline constexpr Millis kZygoteInitialBackoff{1'000};
inline constexpr Millis kZygoteMaxBackoff{60'000};
// A started zygote that has not said ready by then is killed (and counts as dying before ready):
// an exec'd one loads LibTorch (~1 s, longer on a loaded machine), a forked one only waits to be
// re-parented to the supervisor.
inline constexpr Millis kZygoteExecReadyTimeout{60'000};
inline constexpr Millis kZygoteForkReadyTimeout{5'000};

struct ZygoteExitFacts {
  int wait_status = 0;
  bool was_ready = false;     // this process said it can fork
  bool killed_by_us = false;  // the supervisor sent the SIGKILL (stuck, not ready in time)
  bool forked = false;        // it was forked from the other zygote (not exec'd)
};

struct ZygoteRestart {
  TimePoint at{};         // when the place may start a process again
  Millis next_backoff{};  // the backoff after this one
  std::string why;        // for the place's transition log
};

ZygoteRestart DecideZygoteRestart(const ZygoteExitFacts& exit, Millis backoff, TimePoint now);
// `parent_lost`: the fork request went out and its parent zygote died or hung before answering.
ZygoteRestart DecideZygoteStartFailure(bool parent_lost, Millis backoff, TimePoint now);

enum class ZygoteStartHow { kWait, kFork, kExec };
struct ZygoteStartPlan {
  ZygoteStartHow how = ZygoteStartHow::kWait;
  std::string why;
};

// For a place in kDown: `restart_at` its own backoff, `other` the other place's state.
ZygoteStartPlan PlanZygoteStart(ZygoteRole role, TimePoint now, TimePoint restart_at,
                                ZygoteState other);

}  // namespace torchfarm
