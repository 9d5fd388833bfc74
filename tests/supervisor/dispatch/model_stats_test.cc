// ModelStats' latency-objective counters and batch sizes on a fake clock (issue 32): goodput is
// the OK answers within latency_slo_ms per second over whole seconds, misses do not count, old
// seconds fall out of the window; batch_sizes counts batches by rows in powers of two, with every
// batch over 2^20 rows in the last bucket.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "supervisor/dispatch/model_stats.h"

namespace torchfarm {
namespace {

TEST(ModelStatsSlo, GoodputCountsAnswersWithinTheSloPerSecond) {
  FakeTimeSource clock;
  ModelStats stats(clock.Now());
  for (int i = 0; i < 30; ++i) stats.RecordSloOutcome(true, clock.Now());
  for (int i = 0; i < 5; ++i) stats.RecordSloOutcome(false, clock.Now());
  clock.Advance(Millis(1'000));
  for (int i = 0; i < 10; ++i) stats.RecordSloOutcome(true, clock.Now());
  clock.Advance(Millis(1'000));
  EXPECT_DOUBLE_EQ(stats.GoodputOver(clock.Now(), 1), 10.0) << "the last whole second";
  EXPECT_DOUBLE_EQ(stats.GoodputOver(clock.Now(), 60), 20.0) << "40 over the 2 s there were";
  const nlohmann::json slo = stats.ToJson(clock.Now())["slo"];
  EXPECT_EQ(slo["within"], 40);
  EXPECT_EQ(slo["missed"], 5);
  EXPECT_EQ(slo["goodput_rps_1s"], 10.0);
  EXPECT_EQ(slo["goodput_rps_60s"], 20.0);
  clock.Advance(Millis(120'000));
  EXPECT_DOUBLE_EQ(stats.GoodputOver(clock.Now(), 60), 0.0) << "two minutes later: none recent";
  EXPECT_EQ(stats.within_slo(), 40u) << "the lifetime count stays";
}

TEST(ModelStatsSlo, BatchSizesAreCountedInPowersOfTwo) {
  FakeTimeSource clock;
  ModelStats stats(clock.Now());
  EXPECT_TRUE(stats.ToJson(clock.Now())["batch_sizes"].empty()) << "no batch yet";
  const int64_t kMiB = int64_t{1} << 20;
  for (int64_t rows : std::vector<int64_t>{1, 1, 2, 3, 4, 5, 8, 9, kMiB, kMiB + 1, kMiB * kMiB}) {
    stats.RecordBatch(rows);
  }
  const nlohmann::json sizes = stats.ToJson(clock.Now())["batch_sizes"];
  EXPECT_EQ(
      sizes,
      nlohmann::json(
          {{"1", 2}, {"2", 1}, {"4", 2}, {"8", 2}, {"16", 1}, {"1048576", 1}, {"1048577+", 2}}));
  EXPECT_DOUBLE_EQ(
      stats.mean_batch_size(),
      (2 + 2 + 3 + 4 + 5 + 8 + 9 + (1 << 20) + (1 << 20) + 1 + std::pow(2.0, 40)) / 11);
}

}  // namespace
}  // namespace torchfarm
