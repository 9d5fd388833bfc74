// ModelQueue's weighted fair shares on a fake clock (issue 32): backlogged clients of weights
// 1:2:4 are served rows within +-10% of 1:2:4 over 10,000 decisions, with and without batches
// that mix clients; a request's place (RowsAheadOf) puts a light client before a heavy client's
// backlog; and a seeded randomised run over the documented ranges (weights 0.01..100, batch sizes,
// priority levels, rows per request, arrival patterns) keeps every request exactly once, each
// client FIFO, higher levels first, and the shares of the clients that stay backlogged within
// +-10% of their weights (those due 100 rows or more). The seed is printed on failure;
// TORCHFARM_TEST_SEED=N replays one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/client_weights.h"
#include "supervisor/dispatch/model_queue.h"

namespace torchfarm {
namespace {

PendingRequest Make(const std::string& client, double weight, int64_t id, TimePoint now,
                    int64_t rows = 1, int priority = 0) {
  PendingRequest r;
  r.inputs = {TensorSpec{DType::kFloat32, {rows, 4}}};
  r.rows = rows;
  r.slot_bytes = static_cast<uint64_t>(rows * 16);
  r.received = now;
  r.client = client;
  r.client_weight = weight;
  r.priority = priority;
  r.id = id;
  return r;
}

BatchingPolicy Policy(int64_t max_batch, int levels = 1) {
  BatchingPolicy p;
  p.max_batch_size = max_batch;
  p.max_queue_delay_us = 0;
  p.priority_levels = levels;
  p.max_queue_size = 1'000'000;
  return p;
}

struct Tenant {
  std::string name;
  double weight;
};

// Keeps every tenant backlogged (`depth` requests queued each) and takes `decisions` batches;
// returns the rows each tenant was served.
std::map<std::string, int64_t> ServeBacklogged(ModelQueue& q, const std::vector<Tenant>& tenants,
                                               int decisions, int64_t rows_per_request,
                                               int depth = 8) {
  FakeTimeSource clock;
  std::map<std::string, int> queued;
  std::map<std::string, int64_t> served;
  int64_t next_id = 0;
  for (int d = 0; d < decisions; ++d) {
    for (const Tenant& t : tenants) {
      while (queued[t.name] < depth) {
        auto r = Make(t.name, t.weight, next_id++, clock.Now(), rows_per_request);
        EXPECT_TRUE(q.Push(r));
        ++queued[t.name];
      }
    }
    for (const HeldRequest& held : q.TakeBatch(clock.Now())) {
      const PendingRequest& r = *held;
      served[r.client] += r.rows;
      --queued[r.client];
    }
  }
  return served;
}

// Each tenant's rows within +-10% of its weight's share; tenants expected fewer than
// `min_expected` rows are left out (one request more or less is more than 10% of them).
void ExpectShares(const std::map<std::string, int64_t>& served, const std::vector<Tenant>& tenants,
                  const std::string& what, double min_expected = 0) {
  double total_weight = 0;
  int64_t total_rows = 0;
  for (const Tenant& t : tenants) total_weight += t.weight;
  for (const auto& [name, rows] : served) total_rows += rows;
  for (const Tenant& t : tenants) {
    const double expected = static_cast<double>(total_rows) * t.weight / total_weight;
    if (expected < min_expected) continue;
    const auto it = served.find(t.name);
    const double got = it == served.end() ? 0 : static_cast<double>(it->second);
    EXPECT_NEAR(got, expected, 0.1 * expected)
        << what << ": tenant " << t.name << " of weight " << t.weight << " served " << got << " of "
        << total_rows << " rows";
  }
}

TEST(WeightedFairQueue, SharesFollowWeights124Within10PercentOver10000Decisions) {
  const std::vector<Tenant> tenants = {{"one", 1}, {"two", 2}, {"four", 4}};
  ModelQueue q(Policy(1));  // one request per decision
  const auto served = ServeBacklogged(q, tenants, 10'000, 1);
  ExpectShares(served, tenants, "batches of 1");
  int64_t total = 0;
  for (const auto& [name, rows] : served) total += rows;
  EXPECT_EQ(total, 10'000);
}

TEST(WeightedFairQueue, SharesFollowWeightsWhenBatchesMixClientsAndRequestsHaveSeveralRows) {
  const std::vector<Tenant> tenants = {{"one", 1}, {"two", 2}, {"four", 4}};
  ModelQueue q(Policy(8));
  ExpectShares(ServeBacklogged(q, tenants, 10'000, 2, 16), tenants, "batches of 8 rows");
}

TEST(WeightedFairQueue, WeightsAtTheDocumentedLimitsStillServeTheLightestClient) {
  // 100 : 0.01 is 10,000 : 1; over 40,000 one-row decisions the lightest gets ~4 turns, not 0.
  const std::vector<Tenant> tenants = {{"max", kMaxClientWeight}, {"min", kMinClientWeight}};
  ModelQueue q(Policy(1));
  const auto served = ServeBacklogged(q, tenants, 40'000, 1);
  EXPECT_GE(served.count("min") ? served.at("min") : 0, 3);
  EXPECT_LE(served.count("min") ? served.at("min") : 0, 5);
}

TEST(WeightedFairQueue, AWeightOfZeroOrLessCountsAsOne) {
  PendingRequest r;
  r.rows = 3;
  r.client_weight = 0;
  EXPECT_EQ(ModelQueue::FairCost(r), 3 * ModelQueue::kFairUnitsPerRow);
  r.client_weight = 2;
  EXPECT_EQ(ModelQueue::FairCost(r), 3 * ModelQueue::kFairUnitsPerRow / 2);
  r.client_weight = kMinClientWeight;
  EXPECT_EQ(ModelQueue::FairCost(r), 300 * ModelQueue::kFairUnitsPerRow);
}

TEST(WeightedFairQueue, ALightClientsRequestHasOnlyTheCurrentRoundAheadOfIt) {
  FakeTimeSource clock;
  ModelQueue q(Policy(4));
  for (int i = 0; i < 40; ++i) {
    auto r = Make("heavy", 1, i, clock.Now());
    ASSERT_TRUE(q.Push(r));
  }
  ASSERT_EQ(q.TakeBatch(clock.Now()).size(), 4u);
  const PendingRequest light = Make("light", 1, 1000, clock.Now());
  EXPECT_LE(q.RowsAheadOf(light), 1) << "its tag is the virtual time: at most the head's round";
  const PendingRequest heavy = Make("heavy", 1, 41, clock.Now());
  EXPECT_EQ(q.RowsAheadOf(heavy), 36) << "a heavy client's next request is behind its backlog";
  // A higher level counts whole; a lower one not at all.
  ModelQueue levels(Policy(4, 3));
  for (int i = 0; i < 5; ++i) {
    auto high = Make("x", 1, i, clock.Now(), 2, 0);
    auto low = Make("y", 1, 10 + i, clock.Now(), 3, 2);
    ASSERT_TRUE(levels.Push(high));
    ASSERT_TRUE(levels.Push(low));
  }
  EXPECT_EQ(levels.RowsAheadOf(Make("z", 1, 99, clock.Now(), 1, 1)), 10);
  // Without fair queueing the level is one FIFO: everything queued in it is ahead.
  BatchingPolicy fifo = Policy(4);
  fifo.fair_queueing = false;
  ModelQueue plain(fifo);
  for (int i = 0; i < 7; ++i) {
    auto r = Make("heavy", 1, i, clock.Now());
    ASSERT_TRUE(plain.Push(r));
  }
  EXPECT_EQ(plain.RowsAheadOf(light), 7);
}

TEST(WeightedFairQueue, AHeavierClientsNewcomerGoesAheadOfALighterClientsBacklog) {
  FakeTimeSource clock;
  ModelQueue q(Policy(1));
  for (int i = 0; i < 20; ++i) {
    auto r = Make("bulk", 0.5, i, clock.Now());
    ASSERT_TRUE(q.Push(r));
  }
  // Weight 4 against 0.5: "gold"'s 8 requests take 8 * 1/4 = 2 rows of virtual time, in which
  // "bulk" is served one request (1 / 0.5 = 2).
  for (int i = 0; i < 8; ++i) {
    auto r = Make("gold", 4, 100 + i, clock.Now());
    ASSERT_TRUE(q.Push(r));
  }
  int gold = 0;
  for (int i = 0; i < 10; ++i) gold += q.TakeBatch(clock.Now()).at(0)->client == "gold";
  EXPECT_GE(gold, 8) << "gold's 8 requests within the first 10 decisions";
}

// One randomised run: settings drawn over their documented ranges, arrivals in one of three
// patterns; checked invariants as described at the top.
void RandomisedRun(uint32_t seed) {
  std::mt19937 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t max_batch = uniform(1, 32);
  const int levels = static_cast<int>(uniform(1, 3));
  const int clients = static_cast<int>(uniform(2, 6));
  const int pattern = static_cast<int>(uniform(0, 2));  // 0 backlogged, 1 random, 2 bursts
  const int64_t rows = uniform(1, 4);
  std::vector<double> weights;
  for (int c = 0; c < clients; ++c) {
    // Log-uniform over 0.01..100, rounded to 2 decimals as an operator writes them; the shares
    // check needs a few turns of the lightest, so the spread within one run is capped at 1:50.
    const double lo = std::log(kMinClientWeight), hi = std::log(kMaxClientWeight);
    weights.push_back(std::exp(std::uniform_real_distribution<double>(lo, hi)(rng)));
  }
  const double heaviest = *std::max_element(weights.begin(), weights.end());
  for (double& w : weights) w = std::max({w, heaviest / 50, kMinClientWeight});
  SCOPED_TRACE("seed " + std::to_string(seed) + " (TORCHFARM_TEST_SEED=" + std::to_string(seed) +
               " replays it): max_batch " + std::to_string(max_batch) + ", levels " +
               std::to_string(levels) + ", clients " + std::to_string(clients) + ", pattern " +
               std::to_string(pattern) + ", rows " + std::to_string(rows));

  FakeTimeSource clock;
  ModelQueue q(Policy(max_batch, levels));
  std::map<int64_t, std::pair<int, int>> pending;              // id -> (client, level)
  std::map<std::pair<int, int>, int64_t> last_taken;           // (client, level) -> last id served
  std::map<int, int> queued;                                   // level-0 requests queued per client
  std::vector<int> per_level(static_cast<size_t>(levels), 0);  // requests queued per level
  // Backlogged (pattern 0): deep enough that no batch takes a client's whole queue, so every
  // decision sees every client. The others offer ~90% of what the batches take, on average.
  const int depth = static_cast<int>(12 + max_batch);
  const double capacity = static_cast<double>(max_batch) / static_cast<double>(rows * clients);
  std::bernoulli_distribution one_arrival(std::min(1.0, 0.9 * capacity));
  std::bernoulli_distribution burst(std::min(1.0, 0.9 * capacity / 17.5));  // bursts of 5..30
  std::map<int, int64_t> served_rows;  // level-0 rows per client, while backlogged
  int64_t next_id = 0;
  const int kDecisions = 4'000;
  for (int d = 0; d < kDecisions; ++d) {
    clock.Advance(Micros(100));
    for (int c = 0; c < clients; ++c) {
      int arrivals = 0;
      if (pattern == 0) arrivals = std::max(0, depth - queued[c]);
      if (pattern == 1) arrivals = one_arrival(rng) ? 1 : 0;
      if (pattern == 2) arrivals = burst(rng) ? static_cast<int>(uniform(5, 30)) : 0;
      for (int a = 0; a < arrivals; ++a) {
        // Intake refuses beyond the default max_queue_size (1,024): a burst pattern that outruns
        // the batches no longer grows the queue without bound (a seed that did took 11 s, over
        // 100 s under ASan).
        if (q.size() >= 1'024) break;
        // Level 0 carries the shares check; some of the others' traffic lands in lower levels.
        const int level = pattern == 0 ? 0 : static_cast<int>(uniform(0, levels - 1));
        auto r = Make("c" + std::to_string(c), weights[c], next_id, clock.Now(), rows, level);
        ASSERT_TRUE(q.Push(r));
        pending[next_id++] = {c, level};
        ++per_level[static_cast<size_t>(level)];
        if (level == 0) ++queued[c];
      }
    }
    const int highest_queued = static_cast<int>(
        std::find_if(per_level.begin(), per_level.end(), [](int n) { return n > 0; }) -
        per_level.begin());
    std::vector<HeldRequest> batch = q.TakeBatch(clock.Now());
    ASSERT_FALSE(batch.empty() && !pending.empty()) << "work-conserving with no batch delay";
    int64_t batch_rows = 0;
    for (const HeldRequest& held : batch) {
      const PendingRequest& r = *held;
      const int64_t id = r.id.get<int64_t>();
      auto it = pending.find(id);
      ASSERT_NE(it, pending.end()) << "request " << id << " served twice or never queued";
      const auto [c, level] = it->second;
      EXPECT_EQ(level, highest_queued) << "a lower level was served while a higher one waited";
      auto& last = last_taken[{c, level}];
      EXPECT_LT(last, id + 1) << "client " << c << " served out of order";
      last = id + 1;
      batch_rows += r.rows;
      --per_level[static_cast<size_t>(level)];
      if (level == 0) {
        --queued[c];
        if (pattern == 0) served_rows[c] += r.rows;
      }
      pending.erase(it);
    }
    EXPECT_LE(batch_rows, std::max<int64_t>(max_batch, rows));
  }
  while (!q.empty()) {
    for (const HeldRequest& r : q.TakeBatch(clock.Now())) {
      ASSERT_EQ(pending.erase(r->id.get<int64_t>()), 1u) << "request served twice";
    }
  }
  EXPECT_TRUE(pending.empty()) << pending.size() << " requests were never served";
  if (pattern != 0) return;
  std::vector<Tenant> tenants;
  std::map<std::string, int64_t> served;
  for (int c = 0; c < clients; ++c) {
    tenants.push_back({"c" + std::to_string(c), weights[c]});
    served["c" + std::to_string(c)] = served_rows[c];
  }
  ExpectShares(served, tenants, "backlogged", 100);
}

TEST(WeightedFairQueue, SeededRandomisedRunsKeepEveryInvariant) {
  if (const char* fixed = std::getenv("TORCHFARM_TEST_SEED")) {
    RandomisedRun(static_cast<uint32_t>(std::strtoul(fixed, nullptr, 10)));
    return;
  }
  std::random_device device;
  for (int run = 0; run < 8 && !::testing::Test::HasFailure(); ++run) RandomisedRun(device());
}

}  // namespace
}  // namespace torchfarm
