// WorkerSlot's state machine without processes: the transition table, and the transitions a slot
// makes when it has no process (a failed launch, retiring, shutting down), on a fake clock.
#include "supervisor/workers/worker_slot.h"

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

using S = SlotState;

TEST(SlotTransitionTest, TheTableAllowsTheDrawnCycleAndNothingElse) {
  const S all[] = {S::kStarting, S::kReady,  S::kDraining, S::kStopping,
                   S::kBackoff,  S::kFailed, S::kStopped};
  // Allowed transitions as drawn in worker_slot.h.
  const std::pair<S, S> allowed[] = {
      {S::kStopped, S::kStarting},  {S::kStopped, S::kBackoff},   {S::kStarting, S::kReady},    {S::kStarting, S::kDraining},
      {S::kStarting, S::kStopping}, {S::kStarting, S::kBackoff},  {S::kStarting, S::kFailed},
      {S::kStarting, S::kStopped},  {S::kReady, S::kDraining},    {S::kReady, S::kStopping},
      {S::kReady, S::kBackoff},     {S::kReady, S::kFailed},      {S::kReady, S::kStopped},
      {S::kDraining, S::kStopping}, {S::kDraining, S::kBackoff},  {S::kDraining, S::kFailed},
      {S::kDraining, S::kStopped},  {S::kStopping, S::kStopped},  {S::kStopping, S::kBackoff},
      {S::kStopping, S::kFailed},   {S::kBackoff, S::kStarting},  {S::kBackoff, S::kFailed},
      {S::kBackoff, S::kStopped},   {S::kFailed, S::kStarting},   {S::kFailed, S::kBackoff},
      {S::kFailed, S::kStopped}};
  for (S from : all) {
    for (S to : all) {
      bool expected = from == to;
      for (const auto& [a, b] : allowed) expected = expected || (a == from && b == to);
      EXPECT_EQ(SlotTransitionAllowed(from, to), expected)
          << SlotStateName(from) << " -> " << SlotStateName(to);
    }
  }
}

ModelConfig TestModel() {
  ModelConfig m;
  m.name = "m";
  m.path = "/nonexistent/model.pt";
  m.slot_bytes = 4096;
  m.ring_slots = 4;
  return m;
}

class WorkerSlotTest : public ::testing::Test {
 protected:
  WorkerSlotTest() : slot_(0, TestModel(), InstanceConfig{}, 0) {
    // A segment name with a second '/' cannot be created: every launch fails before fork.
    context_.segment_prefix = "torchfarm-test/bad/";
    context_.worker_binary = "/bin/false";
  }
  FakeTimeSource clock_;
  RestartPolicy policy_;
  LaunchContext context_;
  WorkerSlot slot_;
};

TEST_F(WorkerSlotTest, AFailedLaunchBacksOffAndIsRetriedNeverFailed) {
  EXPECT_EQ(slot_.state(), S::kStopped);
  TimePoint previous_restart{};
  for (int i = 0; i < 30; ++i) {
    Status s = slot_.Launch(context_, clock_.Now(), policy_);
    ASSERT_FALSE(s.ok());
    ASSERT_EQ(slot_.state(), S::kBackoff) << "launch " << i << ": " << s.message();
    EXPECT_EQ(slot_.pid(), -1);
    EXPECT_FALSE(slot_.CanAccept());
    EXPECT_NE(slot_.failure_reason().find("launch failed"), std::string::npos);
    EXPECT_GT(slot_.restart_at(), clock_.Now());
    EXPECT_LE(slot_.restart_at(), clock_.Now() + policy_.max_backoff + policy_.max_backoff / 4);
    EXPECT_FALSE(slot_.RestartDue(clock_.Now()));
    EXPECT_EQ(slot_.NextDeadline(Millis(3000), Millis(0)), slot_.restart_at());
    EXPECT_TRUE(slot_.MayServeSoon());
    clock_.Advance(slot_.restart_at() - clock_.Now());
    EXPECT_TRUE(slot_.RestartDue(clock_.Now()));
    previous_restart = slot_.restart_at();
  }
}

TEST_F(WorkerSlotTest, RetiringASlotWithoutAProcessStopsIt) {
  ASSERT_FALSE(slot_.Launch(context_, clock_.Now(), policy_).ok());
  slot_.BeginRetire("scaled down");
  EXPECT_EQ(slot_.state(), S::kStopped);
  EXPECT_FALSE(slot_.MayServeSoon());
  EXPECT_FALSE(slot_.RestartDue(TimePoint::max()));
  EXPECT_EQ(slot_.NextDeadline(Millis(3000), Millis(0)), TimePoint::max());
}

TEST_F(WorkerSlotTest, ShutdownWithoutAProcessStopsAndAGracefulRestartIsIgnored) {
  slot_.BeginGracefulRestart("admin");
  EXPECT_FALSE(slot_.restart_requested()) << "nothing to restart";
  slot_.BeginShutdown(clock_.Now());
  EXPECT_EQ(slot_.state(), S::kStopped);
  EXPECT_FALSE(slot_.StopExpired(clock_.Now() + Millis(60'000)));
}

}  // namespace
}  // namespace torchfarm
