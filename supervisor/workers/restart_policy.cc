#include "supervisor/workers/restart_policy.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>

#include "ipc/control_protocol.h"

namespace torchfarm {

RestartPolicy RestartPolicy::From(const RestartConfig& config) {
  RestartPolicy p;
  p.initial_backoff = Millis(config.initial_backoff_ms);
  p.max_backoff = Millis(config.max_backoff_ms);
  p.max_restarts = config.max_restarts;
  p.window = Millis(config.window_ms);
  p.healthy_after = Millis(config.healthy_after_ms);
  p.failed_retry = Millis(config.failed_retry_ms);
  return p;
}

const char* ExitKindName(ExitKind kind) {
  switch (kind) {
    case ExitKind::kExternal: return "external";
    case ExitKind::kStartFailure: return "start failure";
    case ExitKind::kDeviceFailure: return "device failure";
  }
  return "unknown";
}

ExitKind ClassifyExit(int wait_status, bool reached_ready, bool device_failure,
                      bool reported_model_failure) {
  if (device_failure) return ExitKind::kDeviceFailure;
  // The worker could not map the segment or doorbells the supervisor had just made for it: out of
  // descriptors or memory, the machine's state and never the model's. Retried like a kill.
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == ipc::kExitSegment) {
    return ExitKind::kExternal;
  }
  if (reported_model_failure) return ExitKind::kStartFailure;
  if (reached_ready) return ExitKind::kExternal;
  if (WIFSIGNALED(wait_status)) {
    // Someone sent it: an operator, the OOM killer, the supervisor's own liveness check.
    switch (WTERMSIG(wait_status)) {
      case SIGKILL: case SIGTERM: case SIGINT: case SIGHUP: case SIGQUIT: case SIGPIPE:
        return ExitKind::kExternal;
      default:
        return ExitKind::kStartFailure;  // SIGSEGV, SIGABRT, SIGBUS... while loading
    }
  }
  return ExitKind::kStartFailure;
}

namespace {

Clock::duration Backoff(const RestartPolicy& policy, int exponent, std::minstd_rand* jitter) {
  // Doubling stops at the cap; the shift is bounded so it never overflows.
  Millis backoff = policy.initial_backoff * (int64_t{1} << std::clamp(exponent, 0, 30));
  backoff = std::min(backoff, policy.max_backoff);
  const int64_t spread = backoff.count() / 4;
  Millis extra{spread > 0 ? std::uniform_int_distribution<int64_t>(0, spread)(*jitter) : 0};
  return backoff + extra;
}

}  // namespace

RestartDecision DecideRestart(const RestartPolicy& policy, const ExitFacts& exit, TimePoint now,
                              RestartHistory* history, std::minstd_rand* jitter) {
  RestartDecision decision;
  if (exit.reached_ready &&
      (exit.ready_for >= policy.healthy_after ||
       (exit.killed_from_outside && exit.batches_answered > 0))) {
    history->consecutive_failures = 0;
  }
  if (exit.kind == ExitKind::kDeviceFailure && exit.on_gpu) {
    ++history->gpu_failures;
    if (exit.may_fall_back && history->gpu_failures >= exit.gpu_failures_before_fallback) {
      // The CPU slot starts with a clean record.
      *history = RestartHistory{};
      decision.action = RestartDecision::Action::kFallBackToCpu;
      decision.at = now;
      decision.why = "GPU failed " + std::to_string(exit.gpu_failures_before_fallback) +
                     " time(s); falling back to CPU";
      return decision;
    }
  }
  if (exit.kind == ExitKind::kStartFailure) {
    history->start_failures.push_back(now);
    while (!history->start_failures.empty() && now - history->start_failures.front() > policy.window) {
      history->start_failures.pop_front();
    }
    if (static_cast<int>(history->start_failures.size()) > policy.max_restarts) {
      history->start_failures.clear();
      decision.action = RestartDecision::Action::kFail;
      decision.delay = policy.failed_retry;
      decision.at = now + policy.failed_retry;
      decision.why = "more than " + std::to_string(policy.max_restarts) +
                     " start failures in " + std::to_string(policy.window.count() / 1000) +
                     " s; trying again in " + std::to_string(policy.failed_retry.count() / 1000) +
                     " s";
      return decision;
    }
  }
  decision.delay = Backoff(policy, history->consecutive_failures, jitter);
  decision.at = now + decision.delay;
  ++history->consecutive_failures;
  decision.why = std::string(ExitKindName(exit.kind)) + "; restart in " +
                 std::to_string(std::chrono::duration_cast<Millis>(decision.delay).count()) + " ms";
  return decision;
}

}  // namespace torchfarm
