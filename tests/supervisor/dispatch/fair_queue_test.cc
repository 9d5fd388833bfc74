// ModelQueue between clients and against deadlines, on a fake clock: a backlog of one client does
// not delay another's request beyond the batch being formed, batches still mix clients, one
// client's requests stay FIFO, fairness off is one FIFO, and a deadline nearer than the batch
// delay (less the dispatch lead) makes the batch due.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "supervisor/dispatch/model_queue.h"

namespace torchfarm {
namespace {

PendingRequest Make(const std::string& client, int tag, TimePoint now, int64_t rows = 1) {
  PendingRequest r;
  r.inputs = {TensorSpec{DType::kFloat32, {rows, 4}}};
  r.rows = rows;
  r.slot_bytes = static_cast<uint64_t>(rows * 16);
  r.received = now;
  r.client = client;
  r.id = tag;
  return r;
}

BatchingPolicy FairPolicy(int64_t max_batch, int64_t delay_us, bool fair = true) {
  BatchingPolicy p;
  p.max_batch_size = max_batch;
  p.max_queue_delay_us = delay_us;
  p.fair_queueing = fair;
  p.max_queue_size = 100'000;
  return p;
}

std::vector<int> FairTags(const std::vector<HeldRequest>& batch) {
  std::vector<int> tags;
  for (const auto& r : batch) tags.push_back(r->id.get<int>());
  return tags;
}

TEST(FairQueue, ALightClientGoesBeforeAFloodersBacklog) {
  FakeTimeSource clock;
  ModelQueue q(FairPolicy(4, 0));
  for (int i = 0; i < 100; ++i) {
    auto r = Make("flood", i, clock.Now());
    ASSERT_TRUE(q.Push(r));
  }
  EXPECT_EQ(FairTags(q.TakeBatch(clock.Now())), std::vector<int>({0, 1, 2, 3}));
  auto light = Make("light", 1000, clock.Now());
  ASSERT_TRUE(q.Push(light));
  // The very next batch holds the light request, with the flooder's next ones beside it.
  const auto batch = FairTags(q.TakeBatch(clock.Now()));
  ASSERT_FALSE(batch.empty());
  EXPECT_NE(std::find(batch.begin(), batch.end(), 1000), batch.end())
      << "the light client's request waited behind the flooder's backlog";
  EXPECT_EQ(q.size(), 100u - 4 - 3);
}

TEST(FairQueue, BacklogsOfTwoClientsAreServedInTurn) {
  FakeTimeSource clock;
  ModelQueue q(FairPolicy(1, 0));
  for (int i = 0; i < 10; ++i) {
    auto a = Make("a", i, clock.Now());
    ASSERT_TRUE(q.Push(a));
  }
  for (int i = 0; i < 10; ++i) {
    auto b = Make("b", 100 + i, clock.Now());
    ASSERT_TRUE(q.Push(b));
  }
  std::vector<int> order;
  while (!q.empty()) order.push_back(FairTags(q.TakeBatch(clock.Now())).at(0));
  ASSERT_EQ(order.size(), 20u);
  // Alternating, each client's own requests in their order.
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(order[2 * i], i) << "position " << 2 * i;
    EXPECT_EQ(order[2 * i + 1], 100 + i) << "position " << 2 * i + 1;
  }
  EXPECT_EQ(q.clients(), 0u) << "clients with nothing queued are forgotten";
}

TEST(FairQueue, SharesAreWeightedByRows) {
  FakeTimeSource clock;
  ModelQueue q(FairPolicy(1, 0));  // no merging: one request per batch
  for (int i = 0; i < 4; ++i) {
    auto big = Make("big", i, clock.Now(), 4);
    ASSERT_TRUE(q.Push(big));
  }
  for (int i = 0; i < 8; ++i) {
    auto small = Make("small", 100 + i, clock.Now(), 1);
    ASSERT_TRUE(q.Push(small));
  }
  // After one 4-row request of "big", "small" gets four 1-row turns before big's next.
  std::vector<int> order;
  for (int i = 0; i < 6; ++i) order.push_back(FairTags(q.TakeBatch(clock.Now())).at(0));
  EXPECT_EQ(order, std::vector<int>({0, 100, 101, 102, 103, 1}));
}

TEST(FairQueue, BatchesMixClientsAndKeepEachClientFifo) {
  FakeTimeSource clock;
  ModelQueue q(FairPolicy(8, 0));
  for (int i = 0; i < 6; ++i) {
    auto a = Make("a", i, clock.Now());
    auto b = Make("b", 100 + i, clock.Now());
    ASSERT_TRUE(q.Push(a));
    ASSERT_TRUE(q.Push(b));
  }
  auto batch = FairTags(q.TakeBatch(clock.Now()));
  ASSERT_EQ(batch.size(), 8u);
  std::map<bool, std::vector<int>> per_client;
  for (int tag : batch) per_client[tag >= 100].push_back(tag);
  EXPECT_EQ(per_client[false], std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(per_client[true], std::vector<int>({100, 101, 102, 103}));
}

TEST(FairQueue, OffIsOneFifo) {
  FakeTimeSource clock;
  ModelQueue q(FairPolicy(1, 0, /*fair=*/false));
  for (int i = 0; i < 5; ++i) {
    auto a = Make("a", i, clock.Now());
    ASSERT_TRUE(q.Push(a));
  }
  auto b = Make("b", 100, clock.Now());
  ASSERT_TRUE(q.Push(b));
  std::vector<int> order;
  while (!q.empty()) order.push_back(FairTags(q.TakeBatch(clock.Now())).at(0));
  EXPECT_EQ(order, std::vector<int>({0, 1, 2, 3, 4, 100}));
}

TEST(FairQueue, RequeuedRequestsGoFirstAndExpiryKeepsTheSharesRight) {
  FakeTimeSource clock;
  ModelQueue q(FairPolicy(1, 0));
  for (int i = 0; i < 3; ++i) {
    auto a = Make("a", i, clock.Now());
    a.deadline = clock.Now() + Millis(10 + i);
    ASSERT_TRUE(q.Push(a));
  }
  auto taken = q.TakeBatch(clock.Now());
  ASSERT_EQ(FairTags(taken), std::vector<int>({0}));
  auto b = Make("b", 100, clock.Now());
  ASSERT_TRUE(q.Push(b));
  q.PushFront(std::move(taken));
  EXPECT_EQ(FairTags(q.TakeBatch(clock.Now())), std::vector<int>({0}))
      << "a requeued request first";
  clock.Advance(Millis(12));
  EXPECT_EQ(FairTags(q.TakeExpired(clock.Now())), std::vector<int>({1, 2}));
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.clients(), 1u);
  EXPECT_FALSE(q.NextDeadline().has_value());
  EXPECT_EQ(FairTags(q.TakeBatch(clock.Now())), std::vector<int>({100}));
}

TEST(FairQueue, SetPolicyKeepsEveryRequest) {
  FakeTimeSource clock;
  ModelQueue q(FairPolicy(1, 0));
  for (int i = 0; i < 4; ++i) {
    auto a = Make(i % 2 ? "a" : "b", i, clock.Now());
    ASSERT_TRUE(q.Push(a));
  }
  auto smaller = FairPolicy(1, 0);
  smaller.max_queue_size = 1;
  q.SetPolicy(smaller);
  EXPECT_EQ(q.size(), 4u);
  std::vector<int> order;
  while (!q.empty()) order.push_back(FairTags(q.TakeBatch(clock.Now())).at(0));
  EXPECT_EQ(order, std::vector<int>({0, 1, 2, 3}));
}

// Three clients that keep one request each queued at all times (closed loops) beside one with a
// backlog: the backlog is served one turn in four, not starved.
TEST(FairQueue, ClosedLoopClientsDoNotStarveAPipeliningOne) {
  FakeTimeSource clock;
  ModelQueue q(FairPolicy(1, 0));
  int next_id = 0;
  for (int i = 0; i < 64; ++i) {
    auto r = Make("pipelining", 1000 + i, clock.Now());
    ASSERT_TRUE(q.Push(r));
  }
  const std::string loops[] = {"loop0", "loop1", "loop2"};
  for (const auto& c : loops) {
    auto r = Make(c, next_id++, clock.Now());
    ASSERT_TRUE(q.Push(r));
  }
  int pipelining_served = 0;
  for (int turn = 0; turn < 40; ++turn) {
    auto batch = q.TakeBatch(clock.Now());
    ASSERT_EQ(batch.size(), 1u);
    if (batch[0]->client == "pipelining") {
      ++pipelining_served;
    } else {
      auto again = Make(batch[0]->client, next_id++, clock.Now());  // its next request at once
      ASSERT_TRUE(q.Push(again));
    }
  }
  EXPECT_GE(pipelining_served, 9) << "one turn in four of 40";
  EXPECT_LE(pipelining_served, 11);
}

// Whenever NextDue says a batch is due, TakeBatch gives one (else the loop would spin).
TEST(FairQueue, ADueWakeUpAlwaysFindsABatch) {
  FakeTimeSource clock;
  ModelQueue q(FairPolicy(4, 1000));
  // An old request of another shape, then a newcomer of another client at the head.
  auto old_wide = Make("a", 1, clock.Now(), 1);
  old_wide.inputs = {TensorSpec{DType::kFloat32, {1, 8}}};
  ASSERT_TRUE(q.Push(old_wide));
  auto taken = q.TakeBatch(clock.Now());
  ASSERT_TRUE(taken.empty());
  clock.Advance(Micros(900));
  auto fresh = Make("b", 2, clock.Now(), 1);
  ASSERT_TRUE(q.Push(fresh));
  for (int step = 0; step < 4 && !q.empty(); ++step) {
    ASSERT_TRUE(q.NextDue().has_value());
    clock.Advance(std::max(Clock::duration::zero(), *q.NextDue() - clock.Now()));
    EXPECT_FALSE(q.TakeBatch(clock.Now()).empty()) << "due at step " << step << " but no batch";
  }
  EXPECT_TRUE(q.empty());
}

TEST(DeadlineDispatch, ADeadlineNearerThanTheDelayMakesTheBatchDue) {
  FakeTimeSource clock;
  ModelQueue q(FairPolicy(8, 20'000));  // 20 ms of batch delay
  q.set_dispatch_lead(Micros(500));
  auto r = Make("a", 1, clock.Now());
  r.deadline = clock.Now() + Millis(5);
  ASSERT_TRUE(q.Push(r));
  ASSERT_TRUE(q.NextDue().has_value());
  EXPECT_EQ(*q.NextDue(), clock.Now() + Millis(5) - Micros(500))
      << "the loop must wake before the deadline, not after the 20 ms delay";
  EXPECT_TRUE(q.TakeBatch(clock.Now()).empty()) << "still time to wait for company";
  auto company = Make("b", 2, clock.Now());
  ASSERT_TRUE(q.Push(company));
  clock.Advance(Millis(5) - Micros(500));
  EXPECT_EQ(FairTags(q.TakeBatch(clock.Now())), std::vector<int>({1, 2}))
      << "due at the deadline less the lead, with what is queued";
  EXPECT_FALSE(q.NextDeadline().has_value());
  // Without deadlines the delay rules again.
  auto later = Make("a", 3, clock.Now());
  ASSERT_TRUE(q.Push(later));
  EXPECT_EQ(*q.NextDue(), clock.Now() + Millis(20));
  EXPECT_TRUE(q.TakeBatch(clock.Now()).empty());
}

TEST(DeadlineDispatch, TheEarliestDeadlineStaysExactAfterRemovals) {
  FakeTimeSource clock;
  ModelQueue q(FairPolicy(1, 0));
  for (int i = 0; i < 3; ++i) {
    auto r = Make("a", i, clock.Now());
    r.deadline = clock.Now() + Millis(10 * (i + 1));
    ASSERT_TRUE(q.Push(r));
  }
  EXPECT_EQ(*q.NextDeadline(), clock.Now() + Millis(10));
  q.TakeBatch(clock.Now());
  EXPECT_EQ(*q.NextDeadline(), clock.Now() + Millis(20));
  q.TakeAll();
  EXPECT_FALSE(q.NextDeadline().has_value());
}

TEST(DeadlineDispatch, FloodOfOneClientKeepsItsOrderAtScale) {
  FakeTimeSource clock;
  ModelQueue q(FairPolicy(64, 0));
  for (int i = 0; i < 1000; ++i) {
    auto r = Make("only", i, clock.Now());
    ASSERT_TRUE(q.Push(r));
  }
  int expect = 0;
  while (!q.empty()) {
    for (int tag : FairTags(q.TakeBatch(clock.Now()))) EXPECT_EQ(tag, expect++);
  }
  EXPECT_EQ(expect, 1000);
}

}  // namespace
}  // namespace torchfarm
