// StepFarm, the farm's lifecycle, without processes: every edge of the drawing in
// supervisor/loop/farm_phase.h, its deadlines on a fake clock, and the events each phase ignores.
#include "supervisor/loop/farm_phase.h"

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

constexpr FarmTimeouts kTimeouts{Millis(30'000), Millis(5'000)};

class FarmPhaseTest : public ::testing::Test {
 protected:
  FarmStep Step(FarmEvent event, FarmObservation seen = {}) {
    FarmStep step = StepFarm(state_, event, seen, now_, kTimeouts);
    state_ = step.next;
    return step;
  }
  TimePoint now_ = TimePoint{} + Millis(1'000'000);
  FarmState state_;
};

TEST_F(FarmPhaseTest, StartsServingAndATurnChangesNothing) {
  EXPECT_EQ(state_.phase, FarmPhase::kServing);
  FarmStep step = Step(FarmEvent::kTurn, {true, true});
  EXPECT_EQ(state_.phase, FarmPhase::kServing);
  EXPECT_STREQ(step.actions.what, "");
  EXPECT_FALSE(IsDraining(state_.phase));
  EXPECT_FALSE(HasDeadline(state_.phase));
}

TEST_F(FarmPhaseTest, StopSignalDrainsUntilIdleThenStopsWorkersThenDone) {
  FarmStep step = Step(FarmEvent::kStopSignal);
  EXPECT_EQ(state_.phase, FarmPhase::kDraining);
  EXPECT_EQ(state_.deadline, now_ + kTimeouts.drain);
  EXPECT_TRUE(step.actions.notify_stopping);
  EXPECT_TRUE(IsDraining(state_.phase));
  EXPECT_FALSE(IsStoppingWorkers(state_.phase));

  now_ += Millis(10);
  step = Step(FarmEvent::kTurn, {/*idle=*/false, false});
  EXPECT_EQ(state_.phase, FarmPhase::kDraining) << "work is left and the deadline is ahead";
  EXPECT_FALSE(step.actions.stop_workers);

  step = Step(FarmEvent::kTurn, {/*idle=*/true, false});
  EXPECT_EQ(state_.phase, FarmPhase::kStoppingWorkers);
  EXPECT_EQ(state_.deadline, now_ + kTimeouts.stop_grace);
  EXPECT_TRUE(step.actions.fail_queued);
  EXPECT_TRUE(step.actions.stop_workers);
  EXPECT_FALSE(step.actions.kill_workers);
  EXPECT_TRUE(IsStoppingWorkers(state_.phase));

  step = Step(FarmEvent::kTurn, {true, /*workers_exited=*/true});
  EXPECT_EQ(state_.phase, FarmPhase::kDone);
  EXPECT_FALSE(step.actions.kill_workers);
}

TEST_F(FarmPhaseTest, DrainDeadlineStopsWorkersThoughWorkIsLeft) {
  Step(FarmEvent::kStopSignal);
  now_ += kTimeouts.drain - Millis(1);
  EXPECT_EQ(Step(FarmEvent::kTurn, {false, false}).next.phase, FarmPhase::kDraining);
  now_ += Millis(1);
  FarmStep step = Step(FarmEvent::kTurn, {false, false});
  EXPECT_EQ(state_.phase, FarmPhase::kStoppingWorkers);
  EXPECT_TRUE(step.actions.fail_queued) << "what is still queued is answered, never dropped";
}

TEST_F(FarmPhaseTest, SecondStopSignalSkipsTheRestOfTheDrain) {
  Step(FarmEvent::kStopSignal);
  now_ += Millis(100);
  FarmStep step = Step(FarmEvent::kStopSignal);
  EXPECT_EQ(state_.phase, FarmPhase::kDraining);
  EXPECT_EQ(state_.deadline, now_);
  EXPECT_FALSE(step.actions.notify_stopping) << "systemd was told once";
  EXPECT_EQ(Step(FarmEvent::kTurn, {false, false}).next.phase, FarmPhase::kStoppingWorkers);
}

TEST_F(FarmPhaseTest, WorkersThatDoNotStopAreKilledEveryGrace) {
  Step(FarmEvent::kStopSignal);
  Step(FarmEvent::kTurn, {true, false});
  now_ += kTimeouts.stop_grace - Millis(1);
  EXPECT_FALSE(Step(FarmEvent::kTurn, {true, false}).actions.kill_workers);
  now_ += Millis(1);
  FarmStep step = Step(FarmEvent::kTurn, {true, false});
  EXPECT_TRUE(step.actions.kill_workers);
  EXPECT_EQ(state_.phase, FarmPhase::kStoppingWorkers);
  EXPECT_EQ(state_.deadline, now_ + kTimeouts.stop_grace) << "killed again if still not gone";
  EXPECT_EQ(Step(FarmEvent::kTurn, {true, true}).next.phase, FarmPhase::kDone);
}

TEST_F(FarmPhaseTest, AdminDrainStaysUpWithoutDeadlineUntilAStopSignal) {
  FarmStep step = Step(FarmEvent::kAdminDrain);
  EXPECT_EQ(state_.phase, FarmPhase::kAdminDrained);
  EXPECT_TRUE(step.actions.notify_stopping);
  EXPECT_TRUE(IsDraining(state_.phase));
  EXPECT_FALSE(HasDeadline(state_.phase));
  now_ += Millis(3'600'000);
  EXPECT_EQ(Step(FarmEvent::kTurn, {true, false}).next.phase, FarmPhase::kAdminDrained)
      << "an admin drain never stops the farm by itself";
  EXPECT_STREQ(Step(FarmEvent::kAdminDrain).actions.what, "") << "already draining";

  step = Step(FarmEvent::kStopSignal);
  EXPECT_EQ(state_.phase, FarmPhase::kDraining);
  EXPECT_EQ(state_.deadline, now_ + kTimeouts.drain);
  EXPECT_FALSE(step.actions.notify_stopping) << "the admin drain told systemd already";
}

TEST_F(FarmPhaseTest, LateEventsDoNotMoveAStoppingOrDoneFarm) {
  Step(FarmEvent::kStopSignal);
  Step(FarmEvent::kTurn, {true, false});
  const FarmState stopping = state_;
  EXPECT_STREQ(Step(FarmEvent::kStopSignal).actions.what, "");
  EXPECT_STREQ(Step(FarmEvent::kAdminDrain).actions.what, "");
  EXPECT_EQ(state_.phase, stopping.phase);
  EXPECT_EQ(state_.deadline, stopping.deadline);
  Step(FarmEvent::kTurn, {true, true});
  EXPECT_EQ(state_.phase, FarmPhase::kDone);
  Step(FarmEvent::kStopSignal);
  Step(FarmEvent::kTurn, {false, false});
  EXPECT_EQ(state_.phase, FarmPhase::kDone);
}

TEST_F(FarmPhaseTest, EveryPhaseHasAName) {
  for (FarmPhase phase : {FarmPhase::kServing, FarmPhase::kAdminDrained, FarmPhase::kDraining,
                          FarmPhase::kStoppingWorkers, FarmPhase::kDone}) {
    EXPECT_STRNE(FarmPhaseName(phase), "unknown");
  }
}

}  // namespace
}  // namespace torchfarm
