// Work-conserving batch sizing (supervisor/dispatch/dispatch_planner.h) as pure functions.
#include "supervisor/dispatch/dispatch_planner.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

namespace torchfarm {
namespace {

SplitInputs Idle(int workers, int64_t queued, int64_t max_batch, double fixed, double per_row) {
  SplitInputs in;
  in.queued_rows = queued;
  in.max_batch_rows = max_batch;
  in.fixed_us = fixed;
  in.per_row_us = per_row;
  in.workers.assign(static_cast<size_t>(workers), WorkerLoad{0, true});
  return in;
}

TEST(DispatchPlannerTest, TwoIdleWorkersSplitAQueueOfSixteen) {
  // Issue 15, case 5: 16 clients, max_batch_size 16, two idle workers: 8 rows each.
  EXPECT_EQ(PlanBatchRows(Idle(2, 16, 16, 50, 10)), 8);
  EXPECT_EQ(PlanBatchRows(Idle(3, 16, 16, 50, 10)), 5);
  EXPECT_EQ(PlanBatchRows(Idle(4, 16, 32, 0, 1)), 4);
}

TEST(DispatchPlannerTest, OneAcceptingWorkerTakesTheWholeQueue) {
  SplitInputs in = Idle(2, 16, 16, 50, 10);
  in.workers[1].can_accept = false;
  EXPECT_EQ(PlanBatchRows(in), 16);
  EXPECT_EQ(PlanBatchRows(Idle(1, 40, 16, 50, 10)), 16) << "never more than max_batch_size";
}

TEST(DispatchPlannerTest, ABusyWorkerGetsLessOrNothing) {
  SplitInputs in = Idle(2, 16, 16, 0, 10);
  in.workers[1].backlog_us = 80;  // 8 rows' worth already queued there
  EXPECT_EQ(PlanBatchRows(in), 12) << "water-filling: 12 + 0 here, 4 + 8 there";
  in.workers[1].backlog_us = 1000;
  EXPECT_EQ(PlanBatchRows(in), 16) << "the other worker is far behind: one batch here";
}

TEST(DispatchPlannerTest, TheChosenWorkerPastTheLevelTakesOneRow) {
  SplitInputs in = Idle(2, 4, 16, 0, 10);
  in.workers[0].backlog_us = 500;
  in.chosen = 0;
  EXPECT_EQ(PlanBatchRows(in), 1);
}

TEST(DispatchPlannerTest, WhenDispatchCostsMoreThanTheSplitSavesOneBatchGoes) {
  SplitInputs in = Idle(2, 4, 16, 10, 1);  // splitting saves 2 us of compute
  in.dispatch_us = 50;                      // and costs 50 us of supervisor work
  EXPECT_EQ(PlanBatchRows(in), 4);
  in.dispatch_us = 0.5;
  EXPECT_EQ(PlanBatchRows(in), 2);
}

TEST(DispatchPlannerTest, FreeRowsOrASingleRowNeverSplit) {
  EXPECT_EQ(PlanBatchRows(Idle(2, 16, 16, 50, 0)), 16) << "nothing to gain per row";
  EXPECT_EQ(PlanBatchRows(Idle(2, 1, 16, 50, 10)), 1);
  EXPECT_EQ(PlanBatchRows(Idle(2, 0, 16, 50, 10)), 1) << "at least one row";
}

TEST(BatchCostModelTest, FitsFixedAndPerRowCost) {
  BatchCostModel cost(0.2);
  EXPECT_FALSE(cost.known());
  EXPECT_EQ(cost.BatchUs(8), 0);
  for (int i = 0; i < 200; ++i) {
    cost.Observe(4, 100 + 4 * 10);
    cost.Observe(16, 100 + 16 * 10);
  }
  EXPECT_NEAR(cost.per_row_us(), 10, 0.5);
  EXPECT_NEAR(cost.fixed_us(), 100, 5);
  EXPECT_NEAR(cost.BatchUs(8), 180, 5);
}

TEST(BatchCostModelTest, OneBatchSizeCountsEverythingPerRow) {
  BatchCostModel cost;
  for (int i = 0; i < 10; ++i) cost.Observe(16, 320);
  EXPECT_NEAR(cost.per_row_us(), 20, 1e-9);
  EXPECT_NEAR(cost.fixed_us(), 0, 1e-9);
}

TEST(BatchCostModelTest, UnknownUntilTheWarmupSamplesAreIn) {
  BatchCostModel cost;
  for (int i = 1; i < BatchCostModel::kWarmupSamples; ++i) {
    cost.Observe(1, 100);
    EXPECT_FALSE(cost.known()) << i << " samples";
    EXPECT_EQ(cost.BatchUs(1), 0);
  }
  cost.Observe(1, 100);
  EXPECT_TRUE(cost.known());
  EXPECT_NEAR(cost.BatchUs(1), 100, 1e-9);
}

// The soak's case (seed 17742363996994788091): the first batch a worker ran was SIGSTOPped for
// most of a second; its cost must not become the model's, or early refusal turns requests away.
TEST(BatchCostModelTest, AStalledBatchAmongTheFirstIsLeftOut) {
  BatchCostModel cost;
  cost.Observe(1, 900'000);
  for (int i = 1; i < BatchCostModel::kWarmupSamples; ++i) cost.Observe(2, 2 * 100);
  ASSERT_TRUE(cost.known());
  EXPECT_NEAR(cost.BatchUs(4), 400, 1e-6);
}

TEST(BatchCostModelTest, AStallAfterWarmupMovesTheEstimateByABoundedStep) {
  BatchCostModel cost;  // default weight 0.05
  for (int i = 0; i < 50; ++i) cost.Observe(4, 400);
  cost.Observe(4, 924'000);
  EXPECT_LE(cost.BatchUs(4), 400 * (1 + 0.05 * (BatchCostModel::kOutlierFactor - 1)) + 1e-6);
  for (int i = 0; i < 100; ++i) cost.Observe(4, 400);
  EXPECT_NEAR(cost.BatchUs(4), 400, 1);
}

TEST(BatchCostModelTest, ARealSlowdownIsStillFollowed) {
  BatchCostModel cost;
  for (int i = 0; i < 50; ++i) cost.Observe(8, 800);
  for (int i = 0; i < 150; ++i) cost.Observe(8, 8'000);  // e.g. another tenant took the cores
  EXPECT_NEAR(cost.BatchUs(8), 8'000, 100);
}

// Review finding: 1-row batches of a model whose fixed cost dominates are dear per row, not
// stalls; leaving them out would fit no fixed cost at all.
TEST(BatchCostModelTest, SmallBatchesOfAFixedCostModelAreNotStalls) {
  BatchCostModel cost;
  for (int rows : {32, 32, 32, 1, 1}) cost.Observe(rows, 400 + 10 * rows);
  EXPECT_NEAR(cost.fixed_us(), 400, 1e-6);
  EXPECT_NEAR(cost.per_row_us(), 10, 1e-6);
}

// A model measured at 0 us (whole microseconds) still caps a stall.
TEST(BatchCostModelTest, AZeroCostModelStillCapsAStall) {
  BatchCostModel cost;
  for (int i = 0; i < 10; ++i) cost.Observe(1, 0);
  cost.Observe(1, 900'000);
  EXPECT_LE(cost.BatchUs(1), 0.05 * BatchCostModel::kOutlierFactor * BatchCostModel::kFloorUs);
}

TEST(BatchCostModelTest, HalfTheWarmupStalledKeepsTheMedianSide) {
  BatchCostModel cost;
  // Two of five stalled: the median is a real batch, so both stalls are left out.
  cost.Observe(1, 500'000);
  cost.Observe(1, 50);
  cost.Observe(1, 700'000);
  cost.Observe(1, 50);
  cost.Observe(1, 50);
  EXPECT_NEAR(cost.BatchUs(1), 50, 1e-9);
}

// Latency objective (issue 32): when a request would finish, and how large a batch its head
// allows. Costs: 10 ms a batch plus 10 ms a row; max batch 4.
constexpr SloCost kSloCost{10'000, 10'000, 4};

TEST(SloPlannerTest, AnIdleFarmFinishesANewRequestAfterItsOwnBatch) {
  EXPECT_DOUBLE_EQ(EstimatedFinishUs(kSloCost, 0, 0, 2, 1), 20'000);
  EXPECT_DOUBLE_EQ(EstimatedFinishUs(kSloCost, 0, 0, 2, 3), 40'000);
}

TEST(SloPlannerTest, RowsQueuedAheadRunInFullBatchesSharedOverTheReadyWorkers) {
  // 20 rows ahead: 5 batches of 4 = 5 x 10 + 20 x 10 = 250 ms of work; on one worker all of it,
  // on two half; then the earliest free worker's 30 ms and its own 20 ms batch.
  EXPECT_DOUBLE_EQ(EstimatedFinishUs(kSloCost, 30'000, 20, 1, 1), 30'000 + 250'000 + 20'000);
  EXPECT_DOUBLE_EQ(EstimatedFinishUs(kSloCost, 30'000, 20, 2, 1), 30'000 + 125'000 + 20'000);
  EXPECT_DOUBLE_EQ(EstimatedFinishUs(kSloCost, 30'000, 21, 1, 1), 30'000 + 270'000 + 20'000)
      << "a 21st row needs a sixth batch";
}

TEST(SloPlannerTest, TheBatchIsAsLargeAsTheHeadsDeadlineAllows) {
  // 100 ms to the head's deadline, idle worker: 10 + 10n <= 100 for n <= 9, capped at 4.
  EXPECT_EQ(SloBatchRows(kSloCost, 0, 100'000, 1), 4);
  // Busy for 60 ms: 60 + 10 + 10n <= 100 for n <= 3.
  EXPECT_EQ(SloBatchRows(kSloCost, 60'000, 100'000, 1), 3);
  // Exactly at the deadline still counts as in time.
  EXPECT_EQ(SloBatchRows(kSloCost, 70'000, 100'000, 1), 2);
  EXPECT_EQ(SloBatchRows(kSloCost, 80'000, 100'000, 1), 1);
}

TEST(SloPlannerTest, AHeadThatCannotMakeItGetsZeroRows) {
  EXPECT_EQ(SloBatchRows(kSloCost, 80'001, 100'000, 1), 0);
  EXPECT_EQ(SloBatchRows(kSloCost, 0, 5'000, 1), 0) << "its own batch takes 20 ms";
  EXPECT_EQ(SloBatchRows(kSloCost, 0, 35'000, 3), 0) << "a 3-row head needs 40 ms";
  EXPECT_EQ(SloBatchRows(kSloCost, 0, 40'000, 3), 3);
  EXPECT_EQ(SloBatchRows(kSloCost, 0, -1'000, 1), 0) << "already past its deadline";
}

TEST(SloPlannerTest, AModelWithoutPerRowCostTakesTheWholeBatchWhenItsFixedCostFits) {
  const SloCost flat{5'000, 0, 16};
  EXPECT_EQ(SloBatchRows(flat, 0, 5'000, 1), 16);
  EXPECT_EQ(SloBatchRows(flat, 1, 5'000, 1), 0);
}

// Seeded over costs, backlogs, deadlines and head sizes: a batch the planner allows finishes by
// the deadline, one row more would not (unless the cap stopped it), and zero means the head alone
// does not fit. Prints the seed on failure.
TEST(SloPlannerTest, SeededRandomBatchesAlwaysFinishByTheDeadlineAndAreAsLargeAsAllowed) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> us(0, 50'000);
  for (int i = 0; i < 10'000; ++i) {
    const SloCost cost{us(rng), us(rng) / 10, 1 + static_cast<int64_t>(rng() % 64)};
    const double backlog = us(rng), until = us(rng) * 4 - 20'000;
    const int64_t head = 1 + static_cast<int64_t>(rng() % 8);
    const int64_t rows = SloBatchRows(cost, backlog, until, head);
    auto finish = [&](int64_t n) { return backlog + cost.fixed_us + cost.per_row_us * n; };
    if (rows == 0) {
      ASSERT_GT(finish(head), until) << "seed " << seed << " case " << i;
      continue;
    }
    ASSERT_GE(rows, head) << "seed " << seed << " case " << i;
    ASSERT_LE(finish(rows), until + 1e-6) << "seed " << seed << " case " << i;
    if (rows < cost.max_batch_rows && rows > head) {
      ASSERT_GT(finish(rows + 1), until) << "seed " << seed << " case " << i;
    }
  }
}

}  // namespace
}  // namespace torchfarm
