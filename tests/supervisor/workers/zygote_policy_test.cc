// The zygotes' restart policy (supervisor/workers/zygote_policy.h) on a fake clock, without
// processes: when a place may start again after an exit or a failed start, and whether it forks,
// execs or waits.
#include "supervisor/workers/zygote_policy.h"

#include <signal.h>

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

constexpr int kKilled = SIGKILL;      // a wait status: killed by SIGKILL
constexpr int kTerminated = SIGTERM;  // killed by SIGTERM
constexpr int kSegfault = SIGSEGV;    // crashed
constexpr int kExit1 = 1 << 8;        // exit code 1

ZygoteExitFacts Exit(int wait_status, bool was_ready, bool killed_by_us = false) {
  ZygoteExitFacts f;
  f.wait_status = wait_status;
  f.was_ready = was_ready;
  f.killed_by_us = killed_by_us;
  return f;
}

class ZygotePolicyTest : public ::testing::Test {
 protected:
  FakeTimeSource clock_;
};

TEST_F(ZygotePolicyTest, AReadyZygoteKilledFromOutsideRestartsAtOnceAndResetsTheBackoff) {
  for (int status : {kKilled, kTerminated}) {
    ZygoteRestart r = DecideZygoteRestart(Exit(status, true), Millis(8'000), clock_.Now());
    EXPECT_EQ(r.at, clock_.Now()) << r.why;
    EXPECT_EQ(r.next_backoff, kZygoteInitialBackoff);
    EXPECT_NE(r.why.find("at once"), std::string::npos) << r.why;
  }
}

TEST_F(ZygotePolicyTest, AReadyZygoteThatCrashedOrWasKilledAsStuckWaitsTheInitialBackoff) {
  for (const ZygoteExitFacts& f :
       {Exit(kSegfault, true), Exit(kExit1, true), Exit(kKilled, true, true)}) {
    ZygoteRestart r = DecideZygoteRestart(f, Millis(8'000), clock_.Now());
    EXPECT_EQ(r.at, clock_.Now() + kZygoteInitialBackoff) << r.why;
    EXPECT_EQ(r.next_backoff, kZygoteInitialBackoff) << "never doubles for one that was ready";
  }
  EXPECT_NE(DecideZygoteRestart(Exit(kKilled, true, true), kZygoteInitialBackoff, clock_.Now())
                .why.find("stuck"),
            std::string::npos);
}

TEST_F(ZygotePolicyTest, OneKilledFromOutsideBeforeReadyWaitsTheBackoffWithoutDoubling) {
  ZygoteRestart r = DecideZygoteRestart(Exit(kKilled, false), Millis(2'000), clock_.Now());
  EXPECT_EQ(r.at, clock_.Now() + Millis(2'000));
  EXPECT_EQ(r.next_backoff, Millis(2'000)) << r.why;
  // A forked one is started again at once: a fork costs milliseconds, and a storm of kills
  // must not keep the place empty.
  ZygoteExitFacts forked = Exit(kKilled, false);
  forked.forked = true;
  r = DecideZygoteRestart(forked, Millis(2'000), clock_.Now());
  EXPECT_EQ(r.at, clock_.Now()) << r.why;
  EXPECT_EQ(r.next_backoff, Millis(2'000));
  forked.wait_status = kSegfault;  // its own crash still backs off, doubling
  r = DecideZygoteRestart(forked, Millis(2'000), clock_.Now());
  EXPECT_EQ(r.at, clock_.Now() + Millis(2'000));
  EXPECT_EQ(r.next_backoff, Millis(4'000));
}

TEST_F(ZygotePolicyTest, OneDyingBeforeReadyOnItsOwnDoublesTheBackoffUpToTheCap) {
  Millis backoff = kZygoteInitialBackoff;
  std::vector<Millis> waits;
  for (int i = 0; i < 8; ++i) {
    const int status = i % 2 ? kSegfault : kExit1;
    ZygoteRestart r = DecideZygoteRestart(Exit(status, false), backoff, clock_.Now());
    waits.push_back(std::chrono::duration_cast<Millis>(r.at - clock_.Now()));
    backoff = r.next_backoff;
    clock_.Advance(waits.back());
  }
  const std::vector<Millis> expected = {Millis(1'000),  Millis(2'000),  Millis(4'000),
                                        Millis(8'000),  Millis(16'000), Millis(32'000),
                                        Millis(60'000), Millis(60'000)};
  EXPECT_EQ(waits, expected);
  // Killed by the supervisor for not getting ready in time counts as its own failure.
  ZygoteRestart r = DecideZygoteRestart(Exit(kKilled, false, true), Millis(4'000), clock_.Now());
  EXPECT_EQ(r.next_backoff, Millis(8'000));
  EXPECT_NE(r.why.find("not ready in time"), std::string::npos) << r.why;
}

TEST_F(ZygotePolicyTest, AFailedStartDoublesUnlessTheParentWasLostMidFork) {
  ZygoteRestart refused = DecideZygoteStartFailure(false, Millis(1'000), clock_.Now());
  EXPECT_EQ(refused.at, clock_.Now() + Millis(1'000));
  EXPECT_EQ(refused.next_backoff, Millis(2'000));
  ZygoteRestart lost = DecideZygoteStartFailure(true, Millis(4'000), clock_.Now());
  EXPECT_EQ(lost.at, clock_.Now());
  EXPECT_EQ(lost.next_backoff, Millis(4'000));
}

TEST_F(ZygotePolicyTest, ADownPlaceForksFromAReadyZygoteExecsOnlyAsThePrimaryAndWaitsOtherwise) {
  const TimePoint now = clock_.Now();
  const TimePoint due = now, later = now + Millis(1);
  struct Case {
    ZygoteRole role;
    TimePoint restart_at;
    ZygoteState other;
    ZygoteStartHow how;
  };
  const Case cases[] = {
      {ZygoteRole::kPrimary, later, ZygoteState::kReady, ZygoteStartHow::kWait},  // backing off
      {ZygoteRole::kPrimary, due, ZygoteState::kReady, ZygoteStartHow::kFork},
      {ZygoteRole::kStandby, due, ZygoteState::kReady, ZygoteStartHow::kFork},
      {ZygoteRole::kPrimary, due, ZygoteState::kDown, ZygoteStartHow::kExec},
      {ZygoteRole::kPrimary, due, ZygoteState::kStopping, ZygoteStartHow::kExec},
      // The standby's fork is ready in milliseconds: no second LibTorch load beside it.
      {ZygoteRole::kPrimary, due, ZygoteState::kStarting, ZygoteStartHow::kWait},
      {ZygoteRole::kStandby, due, ZygoteState::kDown, ZygoteStartHow::kWait},
      {ZygoteRole::kStandby, due, ZygoteState::kStarting, ZygoteStartHow::kWait},
      {ZygoteRole::kStandby, due, ZygoteState::kStopping, ZygoteStartHow::kWait},
  };
  for (const Case& c : cases) {
    ZygoteStartPlan plan = PlanZygoteStart(c.role, now, c.restart_at, c.other);
    EXPECT_EQ(plan.how, c.how) << ZygoteRoleName(c.role) << " with the other "
                               << ZygoteStateName(c.other) << ": " << plan.why;
    EXPECT_FALSE(plan.why.empty());
  }
}

TEST_F(ZygotePolicyTest, BothKilledAtOnceTheStandbyForksOnceThePrimaryIsBack) {
  // The sequence the pool walks through: both down and due at once.
  const TimePoint now = clock_.Now();
  EXPECT_EQ(PlanZygoteStart(ZygoteRole::kPrimary, now, now, ZygoteState::kDown).how,
            ZygoteStartHow::kExec);
  EXPECT_EQ(PlanZygoteStart(ZygoteRole::kStandby, now, now, ZygoteState::kStarting).how,
            ZygoteStartHow::kWait);
  EXPECT_EQ(PlanZygoteStart(ZygoteRole::kStandby, now, now, ZygoteState::kReady).how,
            ZygoteStartHow::kFork);
}

TEST(ZygoteStates, TheTransitionTableFollowsTheDrawing) {
  using S = ZygoteState;
  const S all[] = {S::kDown, S::kStarting, S::kReady, S::kStopping};
  auto allowed = [](S from, S to) {
    if (from == to || to == S::kDown) return true;
    if (to == S::kStarting) return from == S::kDown;
    if (to == S::kReady) return from == S::kStarting;
    return from == S::kStarting || from == S::kReady;  // to kStopping
  };
  for (S from : all) {
    for (S to : all) {
      EXPECT_EQ(ZygoteTransitionAllowed(from, to), allowed(from, to))
          << ZygoteStateName(from) << "->" << ZygoteStateName(to);
    }
  }
  EXPECT_STREQ(ZygoteRoleName(ZygoteRole::kPrimary), "primary");
  EXPECT_STREQ(ZygoteRoleName(ZygoteRole::kStandby), "standby");
}

}  // namespace
}  // namespace torchfarm
