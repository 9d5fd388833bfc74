// The restart decision as a pure function on a fake clock: every branch of
// supervisor/workers/restart_policy.h without processes.
#include "supervisor/workers/restart_policy.h"

#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

using Action = RestartDecision::Action;

int Signaled(int signo) { return signo; }        // wait status of a process killed by signo
int Exited(int code) { return (code & 0xff) << 8; }  // wait status of exit(code)

class RestartPolicyTest : public ::testing::Test {
 protected:
  RestartDecision Exit(ExitFacts facts) {
    return DecideRestart(policy_, facts, clock_.Now(), &history_, &jitter_);
  }
  static ExitFacts Killed(Clock::duration ready_for = Millis(500)) {
    ExitFacts f;
    f.kind = ExitKind::kExternal;
    f.reached_ready = true;
    f.ready_for = ready_for;
    return f;
  }
  static ExitFacts StartFailure() {
    ExitFacts f;
    f.kind = ExitKind::kStartFailure;
    return f;
  }
  Millis DelayMs(const RestartDecision& d) { return std::chrono::duration_cast<Millis>(d.delay); }

  RestartPolicy policy_;
  FakeTimeSource clock_;
  RestartHistory history_;
  std::minstd_rand jitter_{42};
};

TEST(ClassifyExitTest, SignalsFromOutsideAreExternalCrashesWhileLoadingAreStartFailures) {
  ASSERT_TRUE(WIFSIGNALED(Signaled(SIGKILL)));
  ASSERT_TRUE(WIFEXITED(Exited(3)));
  EXPECT_EQ(ClassifyExit(Signaled(SIGKILL), false, false, false), ExitKind::kExternal);
  EXPECT_EQ(ClassifyExit(Signaled(SIGTERM), false, false, false), ExitKind::kExternal);
  EXPECT_EQ(ClassifyExit(Signaled(SIGSEGV), false, false, false), ExitKind::kStartFailure);
  EXPECT_EQ(ClassifyExit(Signaled(SIGSEGV), true, false, false), ExitKind::kExternal);
  EXPECT_EQ(ClassifyExit(Exited(3), false, false, false), ExitKind::kStartFailure);
  EXPECT_EQ(ClassifyExit(Exited(1), true, false, false), ExitKind::kExternal);
  EXPECT_EQ(ClassifyExit(Exited(3), true, false, true), ExitKind::kStartFailure)
      << "a model failure the worker reported is a start failure";
  EXPECT_EQ(ClassifyExit(Exited(6), true, true, false), ExitKind::kDeviceFailure);
}

TEST_F(RestartPolicyTest, KillsAfterReadyBackOffExponentiallyUpToTheCapAndNeverFail) {
  const int64_t expected_ms[] = {100, 200, 400, 800, 1600, 3200, 5000, 5000};
  for (int64_t base : expected_ms) {
    RestartDecision d = Exit(Killed());
    ASSERT_EQ(d.action, Action::kRelaunch);
    EXPECT_GE(DelayMs(d).count(), base);
    EXPECT_LE(DelayMs(d).count(), base + base / 4) << "at most 25% jitter";
    EXPECT_EQ(d.at, clock_.Now() + d.delay);
    clock_.Advance(Millis(200));
  }
  for (int i = 0; i < 1000; ++i) {  // a storm of kills: still restarted, still capped
    RestartDecision d = Exit(Killed());
    ASSERT_EQ(d.action, Action::kRelaunch) << "kill " << i;
    ASSERT_LE(DelayMs(d), policy_.max_backoff + policy_.max_backoff / 4);
    clock_.Advance(Millis(200));
  }
}

TEST_F(RestartPolicyTest, OutsideKillsOfServingWorkersRestartAtTheInitialBackoff) {
  // A storm of SIGKILLs from outside, each worker having answered batches: no crash loop.
  for (int i = 0; i < 20; ++i) {
    ExitFacts f = Killed(Millis(20));
    f.killed_from_outside = true;
    f.batches_answered = 3;
    RestartDecision d = Exit(f);
    ASSERT_LE(DelayMs(d).count(), 125) << "kill " << i;
    clock_.Advance(Millis(200));
  }
}

TEST_F(RestartPolicyTest, CrashesHangKillsAndSilentDeathsStillBackOff) {
  ExitFacts crash = Killed(Millis(400));  // SIGSEGV or a hang kill after answering: not outside
  crash.batches_answered = 3;
  ExitFacts silent = Killed(Millis(400));  // killed from outside before answering anything
  silent.killed_from_outside = true;
  for (const ExitFacts& f : {crash, silent}) {
    history_ = RestartHistory{};
    for (int64_t base : {100, 200, 400, 800, 1600}) {
      RestartDecision d = Exit(f);
      EXPECT_GE(DelayMs(d).count(), base);
      EXPECT_LE(DelayMs(d).count(), base + base / 4);
      clock_.Advance(Millis(200));
    }
  }
}

TEST_F(RestartPolicyTest, AHealthyRunResetsTheBackoff) {
  for (int i = 0; i < 6; ++i) Exit(Killed());
  RestartDecision d = Exit(Killed(policy_.healthy_after));
  EXPECT_LE(DelayMs(d).count(), 125) << "ready for healthy_after: back to initial_backoff";
}

TEST_F(RestartPolicyTest, KillsBeforeReadyAreExternalToo) {
  ExitFacts f;
  f.kind = ExitKind::kExternal;
  for (int i = 0; i < 50; ++i) ASSERT_EQ(Exit(f).action, Action::kRelaunch);
}

TEST_F(RestartPolicyTest, StartFailuresBeyondMaxRestartsInTheWindowFailWithACoolDown) {
  for (int i = 0; i < policy_.max_restarts; ++i) {
    ASSERT_EQ(Exit(StartFailure()).action, Action::kRelaunch) << "start failure " << i;
    clock_.Advance(Millis(1000));
  }
  RestartDecision d = Exit(StartFailure());
  EXPECT_EQ(d.action, Action::kFail);
  EXPECT_EQ(d.at, clock_.Now() + policy_.failed_retry) << "retried after the cool-down";
  EXPECT_NE(d.why.find("start failures"), std::string::npos) << d.why;
  // The retry starts with a fresh window: another failure backs off rather than failing at once.
  clock_.Advance(policy_.failed_retry);
  EXPECT_EQ(Exit(StartFailure()).action, Action::kRelaunch);
}

TEST_F(RestartPolicyTest, StartFailuresSpreadBeyondTheWindowNeverFail) {
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(Exit(StartFailure()).action, Action::kRelaunch) << i;
    clock_.Advance(policy_.window / 2);
  }
}

TEST_F(RestartPolicyTest, MaxRestartsZeroFailsTheFirstStartFailureOnly) {
  policy_.max_restarts = 0;
  EXPECT_EQ(Exit(Killed()).action, Action::kRelaunch);
  EXPECT_EQ(Exit(StartFailure()).action, Action::kFail);
}

TEST_F(RestartPolicyTest, GpuFailuresFallBackToCpuAfterTheConfiguredCount) {
  ExitFacts f;
  f.kind = ExitKind::kDeviceFailure;
  f.on_gpu = true;
  f.may_fall_back = true;
  f.gpu_failures_before_fallback = 3;
  EXPECT_EQ(Exit(f).action, Action::kRelaunch);
  EXPECT_EQ(Exit(f).action, Action::kRelaunch);
  RestartDecision d = Exit(f);
  EXPECT_EQ(d.action, Action::kFallBackToCpu);
  EXPECT_EQ(d.at, clock_.Now()) << "the CPU launch goes at once";
  EXPECT_EQ(history_.consecutive_failures, 0) << "the CPU slot starts with a clean record";
}

TEST_F(RestartPolicyTest, GpuFailuresWithoutFallbackKeepRestarting) {
  ExitFacts f;
  f.kind = ExitKind::kDeviceFailure;
  f.on_gpu = true;
  f.may_fall_back = false;
  for (int i = 0; i < 20; ++i) ASSERT_EQ(Exit(f).action, Action::kRelaunch);
}

TEST_F(RestartPolicyTest, ZeroBackoffRestartsAtOnce) {
  policy_.initial_backoff = Millis(0);
  RestartDecision d = Exit(Killed());
  EXPECT_EQ(d.delay, Clock::duration(0));
}

TEST_F(RestartPolicyTest, PolicyComesFromTheConfigKeys) {
  RestartConfig c;
  c.initial_backoff_ms = 7;
  c.max_backoff_ms = 70;
  c.max_restarts = 3;
  c.window_ms = 700;
  c.healthy_after_ms = 7000;
  c.failed_retry_ms = 70000;
  RestartPolicy p = RestartPolicy::From(c);
  EXPECT_EQ(p.initial_backoff, Millis(7));
  EXPECT_EQ(p.max_backoff, Millis(70));
  EXPECT_EQ(p.max_restarts, 3);
  EXPECT_EQ(p.window, Millis(700));
  EXPECT_EQ(p.healthy_after, Millis(7000));
  EXPECT_EQ(p.failed_retry, Millis(70000));
  RestartConfig defaults;
  EXPECT_EQ(defaults.max_backoff_ms, 5000) << "README documents 5 s";
  EXPECT_EQ(defaults.failed_retry_ms, 300000) << "README documents 5 min";
}

}  // namespace
}  // namespace torchfarm
