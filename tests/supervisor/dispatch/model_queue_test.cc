// ModelQueue's batching policy on a fake clock: size limit, delay, preferred sizes, priorities,
// mixed shapes, oversize requests, queue full and deadlines.
#include <gtest/gtest.h>

#include "supervisor/dispatch/model_queue.h"

namespace torchfarm {
namespace {

PendingRequest Make(int64_t rows, TimePoint now, int tag, int64_t width = 4, int priority = 0) {
  PendingRequest r;
  r.inputs = {TensorSpec{DType::kFloat32, {rows, width}}};
  r.rows = rows;
  r.slot_bytes = static_cast<uint64_t>(rows * width * 4);
  r.received = now;
  r.priority = priority;
  r.id = tag;
  return r;
}

std::vector<int> Tags(const std::vector<HeldRequest>& batch) {
  std::vector<int> tags;
  for (const auto& r : batch) tags.push_back(r->id.get<int>());
  return tags;
}

BatchingPolicy Policy(int64_t max_batch, int64_t delay_us) {
  BatchingPolicy p;
  p.max_batch_size = max_batch;
  p.max_queue_delay_us = delay_us;
  return p;
}

TEST(ModelQueue, NoBatchingSendsEachRequestAtOnce) {
  FakeTimeSource clock;
  ModelQueue q(Policy(1, 0));
  for (int i = 0; i < 3; ++i) {
    auto r = Make(1, clock.Now(), i);
    ASSERT_TRUE(q.Push(r));
  }
  EXPECT_EQ(Tags(q.TakeBatch(clock.Now())), std::vector<int>({0}));
  EXPECT_EQ(Tags(q.TakeBatch(clock.Now())), std::vector<int>({1}));
  EXPECT_EQ(q.size(), 1u);
}

TEST(ModelQueue, WaitsForCompanyUntilTheDelayThenSendsWhatItHas) {
  FakeTimeSource clock;
  ModelQueue q(Policy(8, 1000));
  for (int i = 0; i < 3; ++i) {
    auto r = Make(1, clock.Now(), i);
    q.Push(r);
  }
  EXPECT_TRUE(q.TakeBatch(clock.Now()).empty()) << "3 of 8 rows and no delay elapsed";
  ASSERT_TRUE(q.NextDue().has_value());
  EXPECT_EQ(*q.NextDue(), clock.Now() + Micros(1000));
  clock.Advance(Micros(999));
  EXPECT_TRUE(q.TakeBatch(clock.Now()).empty());
  clock.Advance(Micros(1));
  EXPECT_EQ(Tags(q.TakeBatch(clock.Now())), std::vector<int>({0, 1, 2}));
  EXPECT_TRUE(q.empty());
}

TEST(ModelQueue, FullBatchGoesAtOnceAndRespectsTheRowLimit) {
  FakeTimeSource clock;
  ModelQueue q(Policy(4, 1'000'000));
  for (int i = 0; i < 3; ++i) {
    auto r = Make(2, clock.Now(), i);  // 2 rows each
    q.Push(r);
  }
  EXPECT_EQ(Tags(q.TakeBatch(clock.Now())), std::vector<int>({0, 1})) << "4 rows fill the batch";
  EXPECT_TRUE(q.TakeBatch(clock.Now()).empty()) << "the third waits for company";
}

TEST(ModelQueue, ZeroDelayDispatchesWhateverIsQueued) {
  FakeTimeSource clock;
  ModelQueue q(Policy(16, 0));
  for (int i = 0; i < 5; ++i) {
    auto r = Make(1, clock.Now(), i);
    q.Push(r);
  }
  EXPECT_EQ(q.TakeBatch(clock.Now()).size(), 5u);
}

TEST(ModelQueue, PreferredSizeGoesWithoutWaiting) {
  FakeTimeSource clock;
  BatchingPolicy p = Policy(16, 1'000'000);
  p.preferred_batch_sizes = {4, 8};
  ModelQueue q(p);
  for (int i = 0; i < 6; ++i) {
    auto r = Make(1, clock.Now(), i);
    q.Push(r);
  }
  EXPECT_EQ(Tags(q.TakeBatch(clock.Now())), std::vector<int>({0, 1, 2, 3}))
      << "the largest preferred prefix (4) goes; 6 is not preferred";
  EXPECT_TRUE(q.TakeBatch(clock.Now()).empty());
}

TEST(ModelQueue, HigherPriorityFirstAndFifoWithinALevel) {
  FakeTimeSource clock;
  BatchingPolicy p = Policy(1, 0);
  p.priority_levels = 3;
  ModelQueue q(p);
  auto a = Make(1, clock.Now(), 1, 4, 2);
  auto b = Make(1, clock.Now(), 2, 4, 0);
  auto c = Make(1, clock.Now(), 3, 4, 1);
  auto d = Make(1, clock.Now(), 4, 4, 0);
  auto e = Make(1, clock.Now(), 5, 4, 9);  // clamped to the lowest level
  for (auto* r : {&a, &b, &c, &d, &e}) q.Push(*r);
  std::vector<int> order;
  while (!q.empty()) order.push_back(Tags(q.TakeBatch(clock.Now()))[0]);
  EXPECT_EQ(order, std::vector<int>({2, 4, 3, 1, 5}));
}

TEST(ModelQueue, OnlyCompatibleShapesShareABatch) {
  FakeTimeSource clock;
  ModelQueue q(Policy(8, 0));
  auto a = Make(1, clock.Now(), 1, 4);
  auto b = Make(1, clock.Now(), 2, 5);  // other trailing shape
  auto c = Make(1, clock.Now(), 3, 4);
  auto d = Make(1, clock.Now(), 4, 4);
  d.inputs[0].dtype = DType::kFloat64;  // other dtype
  for (auto* r : {&a, &b, &c, &d}) q.Push(*r);
  EXPECT_EQ(Tags(q.TakeBatch(clock.Now())), std::vector<int>({1, 3}));
  EXPECT_EQ(Tags(q.TakeBatch(clock.Now())), std::vector<int>({2}));
  EXPECT_EQ(Tags(q.TakeBatch(clock.Now())), std::vector<int>({4}));
}

TEST(ModelQueue, OversizeAndUnbatchableRequestsGoAlone) {
  FakeTimeSource clock;
  ModelQueue q(Policy(4, 1'000'000));
  auto big = Make(10, clock.Now(), 1);
  auto small = Make(1, clock.Now(), 2);
  auto odd = Make(1, clock.Now(), 3);
  odd.batchable = false;
  for (auto* r : {&big, &small, &odd}) q.Push(*r);
  EXPECT_EQ(Tags(q.TakeBatch(clock.Now())), std::vector<int>({1}));
  EXPECT_TRUE(q.TakeBatch(clock.Now()).empty()) << "a lone small request waits for company";
  clock.Advance(Micros(1'000'000));
  EXPECT_EQ(Tags(q.TakeBatch(clock.Now())), std::vector<int>({2}))
      << "the unbatchable request is never merged";
  EXPECT_EQ(Tags(q.TakeBatch(clock.Now())), std::vector<int>({3}));
}

TEST(ModelQueue, ByteBudgetOfTheRingSlotLimitsABatch) {
  FakeTimeSource clock;
  BatchingPolicy p = Policy(16, 0);
  p.max_batch_bytes = 3 * 16;  // three rows of 4 floats
  ModelQueue q(p);
  for (int i = 0; i < 5; ++i) {
    auto r = Make(1, clock.Now(), i);
    q.Push(r);
  }
  EXPECT_EQ(q.TakeBatch(clock.Now()).size(), 3u);
}

TEST(ModelQueue, FullQueueRefusesAndLeavesTheRequestIntact) {
  FakeTimeSource clock;
  BatchingPolicy p = Policy(1, 0);
  p.max_queue_size = 2;
  ModelQueue q(p);
  auto a = Make(1, clock.Now(), 1), b = Make(1, clock.Now(), 2), c = Make(1, clock.Now(), 3);
  EXPECT_TRUE(q.Push(a));
  EXPECT_TRUE(q.Push(b));
  EXPECT_FALSE(q.Push(c));
  EXPECT_EQ(c.id.get<int>(), 3) << "a refused request is not moved from";
  EXPECT_EQ(q.size(), 2u);
}

TEST(ModelQueue, ExpiredRequestsLeaveTheQueue) {
  FakeTimeSource clock;
  ModelQueue q(Policy(8, 1'000'000));
  auto a = Make(1, clock.Now(), 1);
  a.deadline = clock.Now() + Millis(5);
  auto b = Make(1, clock.Now(), 2);
  q.Push(a);
  q.Push(b);
  EXPECT_EQ(*q.NextDeadline(), clock.Now() + Millis(5));
  EXPECT_TRUE(q.TakeExpired(clock.Now()).empty());
  clock.Advance(Millis(5));
  auto expired = q.TakeExpired(clock.Now());
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0]->id.get<int>(), 1);
  EXPECT_EQ(q.size(), 1u);
  EXPECT_FALSE(q.NextDeadline().has_value());
}

TEST(ModelQueue, QueuedDeadlinesStillExpireAfterAPolicyChange) {
  FakeTimeSource clock;
  ModelQueue q(Policy(8, 1'000'000));
  auto a = Make(1, clock.Now(), 1);
  a.deadline = clock.Now() + Millis(5);
  auto b = Make(1, clock.Now(), 2, 4, 1);
  b.deadline = clock.Now() + Millis(3);
  auto c = Make(1, clock.Now(), 3);
  q.Push(a);
  q.Push(b);
  q.Push(c);
  BatchingPolicy reloaded = Policy(4, 1'000'000);
  reloaded.priority_levels = 2;
  q.SetPolicy(reloaded);  // what a reload does
  ASSERT_TRUE(q.NextDeadline().has_value());
  EXPECT_EQ(*q.NextDeadline(), clock.Now() + Millis(3));
  clock.Advance(Millis(5));
  auto expired = q.TakeExpired(clock.Now());
  ASSERT_EQ(expired.size(), 2u);
  EXPECT_EQ(q.size(), 1u);
  EXPECT_FALSE(q.NextDeadline().has_value());
}

TEST(ModelQueue, RequeuedRequestsGoFirstInTheirOrder) {
  FakeTimeSource clock;
  ModelQueue q(Policy(1, 0));
  auto a = Make(1, clock.Now(), 1);
  q.Push(a);
  std::vector<HeldRequest> back;
  back.push_back(std::make_unique<PendingRequest>(Make(1, clock.Now(), 7)));
  back.push_back(std::make_unique<PendingRequest>(Make(1, clock.Now(), 8)));
  q.PushFront(std::move(back));
  EXPECT_EQ(Tags(q.TakeBatch(clock.Now())), std::vector<int>({7}));
  EXPECT_EQ(Tags(q.TakeBatch(clock.Now())), std::vector<int>({8}));
  EXPECT_EQ(Tags(q.TakeBatch(clock.Now())), std::vector<int>({1}));
}

}  // namespace
}  // namespace torchfarm

namespace torchfarm {
namespace {

// The supervisor caps a batch to split the queue over idle workers: a capped batch that is full
// goes at once, without waiting for the delay, and queued_rows() tracks what is left.
TEST(ModelQueue, RowCapSizesADueBatchOnly) {
  FakeTimeSource clock;
  BatchingPolicy p;
  p.max_batch_size = 16;
  p.max_queue_delay_us = 1'000'000;
  ModelQueue q(p);
  for (int i = 0; i < 10; ++i) {
    PendingRequest r;
    r.inputs = {TensorSpec{DType::kFloat32, {1, 4}}};
    r.rows = 1;
    r.slot_bytes = 16;
    r.received = clock.Now();
    r.id = i;
    q.Push(r);
  }
  EXPECT_EQ(q.queued_rows(), 10);
  EXPECT_TRUE(q.TakeBatch(clock.Now()).empty()) << "10 of 16 rows wait for the delay";
  EXPECT_TRUE(q.TakeBatch(clock.Now(), 5).empty())
      << "a cap sizes a due batch; it does not make one due (the delay still holds)";
  clock.Advance(Micros(1'000'000));
  EXPECT_EQ(q.TakeBatch(clock.Now(), 5).size(), 5u) << "due: the cap splits it";
  EXPECT_EQ(q.queued_rows(), 5);
  EXPECT_EQ(q.TakeBatch(clock.Now(), 5).size(), 5u);
  EXPECT_EQ(q.queued_rows(), 0);
  for (int i = 0; i < 20; ++i) {
    PendingRequest r;
    r.inputs = {TensorSpec{DType::kFloat32, {1, 4}}};
    r.rows = 1;
    r.slot_bytes = 16;
    r.received = clock.Now();
    q.Push(r);
  }
  EXPECT_EQ(q.TakeBatch(clock.Now(), 8).size(), 8u) << "16 rows queued fill a batch: due now";
  EXPECT_EQ(q.TakeBatch(clock.Now(), 8).size(), 8u);
  EXPECT_TRUE(q.TakeBatch(clock.Now(), 8).empty()) << "4 rows wait for company";
}

}  // namespace
}  // namespace torchfarm
