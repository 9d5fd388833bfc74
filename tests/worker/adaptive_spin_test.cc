// The worker's idle-poll policy (worker/adaptive_spin.h) on recorded gaps and load samples,
// without a worker.
#include "worker/adaptive_spin.h"

#include <gtest/gtest.h>

namespace torchfarm::worker {
namespace {

using Micros = AdaptiveSpin::Micros;

TEST(AdaptiveSpin, ZeroNeverPolls) {
  AdaptiveSpin spin(0);
  EXPECT_EQ(spin.Budget().count(), 0);
  for (int i = 0; i < 20; ++i) spin.Record(Micros(10));
  EXPECT_EQ(spin.Budget().count(), 0);
}

TEST(AdaptiveSpin, BackToBackRequestsArePolledForUpToTheWindow) {
  AdaptiveSpin spin(300);
  EXPECT_EQ(spin.Budget().count(), 300) << "no history: try";
  for (int i = 0; i < 20; ++i) spin.Record(Micros(60));
  EXPECT_EQ(spin.typical_gap().count(), 60);
  EXPECT_EQ(spin.Budget().count(), 300);
}

TEST(AdaptiveSpin, LongGapsSleepAtOnceAndShortOnesBringThePollBack) {
  AdaptiveSpin spin(300);
  for (size_t i = 0; i < AdaptiveSpin::kWindow; ++i) spin.Record(Micros(100'000));
  EXPECT_EQ(spin.Budget().count(), 0) << "an idle or bursty client: sleep";
  for (size_t i = 0; i < AdaptiveSpin::kWindow / 2 + 1; ++i) spin.Record(Micros(80));
  EXPECT_EQ(spin.Budget().count(), 300);
}

TEST(AdaptiveSpin, OneOutlierDoesNotStopThePoll) {
  AdaptiveSpin spin(300);
  for (int i = 0; i < 7; ++i) spin.Record(Micros(50));
  spin.Record(Micros(50'000));
  EXPECT_EQ(spin.Budget().count(), 300);
}

TEST(AdaptiveSpin, ASaturatedMachineStopsThePollAndRoomBringsItBack) {
  AdaptiveSpin spin(300);
  for (int i = 0; i < 8; ++i) spin.Record(Micros(30));
  spin.NoteLoad(5, 2);
  EXPECT_EQ(spin.Budget().count(), 300) << "one busy sample is not enough";
  spin.NoteLoad(4, 2);
  EXPECT_TRUE(spin.machine_busy());
  EXPECT_EQ(spin.Budget().count(), 0) << "more runnable threads than cores: polling steals";
  spin.NoteLoad(9, 2);
  EXPECT_EQ(spin.Budget().count(), 0);
  spin.NoteLoad(2, 2);  // this thread and one more on 2 cores: room
  EXPECT_FALSE(spin.machine_busy());
  EXPECT_EQ(spin.Budget().count(), 300);
}

}  // namespace
}  // namespace torchfarm::worker
