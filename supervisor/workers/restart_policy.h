// What happens to a worker slot after its process ended: a pure function of the exit, the slot's
// restart history and the time, so every branch is unit-tested on a fake clock without processes.
// Runs on the supervisor's loop thread (called by WorkerSlot::OnExit).
//
// The policy (README "Faults"), in the manner of Kubernetes' CrashLoopBackOff:
//   kExternal      the process was killed (by a signal an operator, the OOM killer or the hang
//                  check sends), crashed or exited after it reached ready, or could not map the
//                  segment made for it (out of descriptors or memory: the machine's state). Always restarted
//                  after a capped exponential backoff: initial * 2^n, at most max_backoff, plus
//                  0-25% jitter; n resets once a process stayed ready healthy_after, or when a
//                  process that answered batches was killed from outside (SIGKILL or SIGTERM not
//                  sent by the supervisor's own hang or liveness checks): a storm of outside kills
//                  is answered at the initial backoff, while crashes (SIGSEGV, SIGABRT, an exit
//                  code), hang kills and deaths before the first answer still back off. Never failed
//                  for this: a serving farm does not turn itself off because its workers were
//                  killed from outside.
//   kStartFailure  the process ended on its own before it reached ready (the model does not load,
//                  warm-up failed, a crash while loading). Backed off the same way; more than
//                  max_restarts of them within window marks the slot failed, and a failed slot
//                  is retried after failed_retry (a fixed file or freed memory brings it back
//                  without an operator).
//   kDeviceFailure the GPU became unusable. Counts towards gpu_failures_before_fallback; reaching
//                  it with fallback "cpu" relaunches on the CPU at once; otherwise as kExternal.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <string>

#include "common/clock.h"
#include "common/config.h"

namespace torchfarm {

struct RestartPolicy {
  Millis initial_backoff{100};
  Millis max_backoff{5'000};
  int max_restarts = 5;  // start failures within `window` beyond which the slot is failed
  Millis window{60'000};
  Millis healthy_after{10'000};  // a worker ready this long resets the backoff
  Millis failed_retry{300'000};  // a failed slot is launched again after this cool-down

  static RestartPolicy From(const RestartConfig& config);
};

enum class ExitKind { kExternal, kStartFailure, kDeviceFailure };
const char* ExitKindName(ExitKind kind);

// What the slot knew about the process that ended.
struct ExitFacts {
  ExitKind kind = ExitKind::kExternal;
  bool reached_ready = false;
  Clock::duration ready_for{0};  // how long it was ready before it ended
  uint64_t batches_answered = 0;  // by this process
  // SIGKILL or SIGTERM from someone else than the supervisor (an operator, the OOM killer).
  bool killed_from_outside = false;
  bool on_gpu = false;           // it ran on a cuda:N device (not after a fallback)
  bool may_fall_back = false;    // the instance's fallback is "cpu"
  int gpu_failures_before_fallback = 1;
};

// What the policy remembers of a slot between processes.
struct RestartHistory {
  int consecutive_failures = 0;          // exponent of the next backoff
  std::deque<TimePoint> start_failures;  // within the window
  int gpu_failures = 0;
};

struct RestartDecision {
  enum class Action { kRelaunch, kFallBackToCpu, kFail };
  Action action = Action::kRelaunch;
  TimePoint at{};     // when to launch (kFail: when to try again)
  Clock::duration delay{0};
  std::string why;    // for the slot's state transition log
};

// Classifies a wait status: signals an operator or the supervisor sends (KILL, TERM, INT, HUP,
// QUIT), anything after ready, and a worker that could not map its segment (ipc::kExitSegment:
// descriptors or memory ran out) are kExternal; an exit or crash of its own before ready is a
// start failure. `device_failure` (reported by the worker or its exit code) wins.
ExitKind ClassifyExit(int wait_status, bool reached_ready, bool device_failure,
                      bool requested_model_failure);

// Decides and records the exit in `history`. `jitter` draws the 0-25% jitter.
RestartDecision DecideRestart(const RestartPolicy& policy, const ExitFacts& exit, TimePoint now,
                              RestartHistory* history, std::minstd_rand* jitter);

}  // namespace torchfarm
