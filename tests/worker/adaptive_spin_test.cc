// The worker's idle-poll policy (worker/adaptive_spin.h) on recorded gaps, without a worker.
#include "worker/adaptive_spin.h"

#include <gtest/gtest.h>

namespace torchfarm::worker {
namespace {

using Micros = AdaptiveSpin::Micros;

TEST(AdaptiveSpin, ZeroNeverPolls) {
  AdaptiveSpin spin(0);
  EXPECT_EQ(spin.Budget().count(), 0);
  for (int i = 0; i < 20; ++i) spin.Record(Micros(10), false, false);
  EXPECT_EQ(spin.Budget().count(), 0);
}

TEST(AdaptiveSpin, BackToBackRequestsArePolledForUpToTheWindow) {
  AdaptiveSpin spin(300);
  EXPECT_EQ(spin.Budget().count(), 300) << "no history: try";
  for (int i = 0; i < 20; ++i) spin.Record(Micros(60), true, false);
  EXPECT_EQ(spin.typical_gap().count(), 60);
  EXPECT_EQ(spin.Budget().count(), 300);
}

TEST(AdaptiveSpin, LongGapsSleepAtOnceAndShortOnesBringThePollBack) {
  AdaptiveSpin spin(300);
  for (size_t i = 0; i < AdaptiveSpin::kWindow; ++i) spin.Record(Micros(100'000), true, false);
  EXPECT_EQ(spin.Budget().count(), 0) << "an idle or bursty client: sleep";
  // Slept through the next gaps (not polled), which were short again.
  for (size_t i = 0; i < AdaptiveSpin::kWindow / 2 + 1; ++i) spin.Record(Micros(80), false, false);
  EXPECT_EQ(spin.Budget().count(), 300);
}

TEST(AdaptiveSpin, OneOutlierDoesNotStopThePoll) {
  AdaptiveSpin spin(300);
  for (int i = 0; i < 7; ++i) spin.Record(Micros(50), true, false);
  spin.Record(Micros(50'000), true, false);
  EXPECT_EQ(spin.Budget().count(), 300);
}

TEST(AdaptiveSpin, APreemptedPollBacksOffForDoublingPasses) {
  AdaptiveSpin spin(300);
  spin.Record(Micros(40), true, true);  // lost the core while polling: others need it
  EXPECT_EQ(spin.backoff_passes(), 1u);
  EXPECT_EQ(spin.Budget().count(), 0);
  spin.NotePass(false);
  EXPECT_EQ(spin.Budget().count(), 300);
  spin.Record(Micros(40), true, true);
  EXPECT_EQ(spin.backoff_passes(), 2u);
  spin.NotePass(false);
  EXPECT_EQ(spin.Budget().count(), 0);
  spin.NotePass(false);
  EXPECT_EQ(spin.Budget().count(), 300);
  spin.Record(Micros(40), true, false);  // undisturbed: the next preemption starts over at 1
  spin.Record(Micros(40), true, true);
  EXPECT_EQ(spin.backoff_passes(), 1u);
  EXPECT_EQ(spin.preemptions(), 3u);
}

TEST(AdaptiveSpin, APreemptedPassStopsThePollToo) {
  // A saturated machine: the worker loses its core while it computes, before any poll.
  AdaptiveSpin spin(300);
  for (int i = 0; i < 8; ++i) spin.Record(Micros(30), true, false);
  spin.NotePass(true);
  EXPECT_EQ(spin.Budget().count(), 0);
  spin.Record(Micros(30), false, false);
  spin.NotePass(true);
  EXPECT_EQ(spin.backoff_passes(), 2u) << "doubling while passes keep being preempted";
  spin.NotePass(false);
  spin.NotePass(false);
  EXPECT_EQ(spin.Budget().count(), 300) << "undisturbed passes bring the poll back";
}

TEST(AdaptiveSpin, BackoffIsCapped) {
  AdaptiveSpin spin(300);
  for (int i = 0; i < 40; ++i) {
    spin.NotePass(true);
    while (spin.backoff_passes() > 0) spin.NotePass(false);
  }
  spin.NotePass(true);
  EXPECT_EQ(spin.backoff_passes(), AdaptiveSpin::kMaxBackoffPasses);
}

}  // namespace
}  // namespace torchfarm::worker
