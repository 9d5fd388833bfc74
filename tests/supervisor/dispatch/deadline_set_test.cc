// DeadlineSet (supervisor/dispatch/deadline_set.h): a sorted multiset of the queue's deadlines.
// Checked against std::multiset over seeded random sequences of inserts (in order, out of order,
// repeated) and removals (the earliest, any element, down to empty and again), printing the seed
// on failure; and the cases a queue makes most: FIFO arrivals and departures, the front
// compaction, duplicates.
#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <random>
#include <set>

#include "supervisor/dispatch/deadline_set.h"

namespace torchfarm {
namespace {

TimePoint At(int64_t us) { return TimePoint{} + Micros(us); }

TEST(DeadlineSet, StartsEmptyAndKeepsTheEarliestOfOutOfOrderInserts) {
  DeadlineSet set;
  EXPECT_TRUE(set.empty());
  EXPECT_EQ(set.size(), 0u);
  set.insert(At(30));
  set.insert(At(10));
  set.insert(At(20));
  set.insert(At(10));
  EXPECT_EQ(set.size(), 4u);
  EXPECT_EQ(set.earliest(), At(10));
  set.erase(At(10));
  EXPECT_EQ(set.earliest(), At(10));  // the duplicate stays
  set.erase(At(20));                  // from the middle
  EXPECT_EQ(set.earliest(), At(10));
  set.erase(At(10));
  EXPECT_EQ(set.earliest(), At(30));
  set.erase(At(30));
  EXPECT_TRUE(set.empty());
  set.insert(At(5));  // usable again after emptying
  EXPECT_EQ(set.earliest(), At(5));
  set.clear();
  EXPECT_TRUE(set.empty());
}

TEST(DeadlineSet, FifoTrafficPastTheCompactionPointKeepsTheEarliest) {
  // A queue that never empties: arrivals at the back, departures at the front, thousands of
  // times the compaction threshold, with a backlog of 100 always queued.
  DeadlineSet set;
  int64_t next_in = 0, next_out = 0;
  for (; next_in < 100; ++next_in) set.insert(At(next_in));
  for (int i = 0; i < 100000; ++i) {
    ASSERT_EQ(set.earliest(), At(next_out)) << "step " << i;
    set.erase(At(next_out++));
    set.insert(At(next_in++));
    ASSERT_EQ(set.size(), 100u);
  }
}

TEST(DeadlineSet, MatchesAMultisetOverRandomInsertsAndRemovals) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 50; ++round) {
    DeadlineSet set;
    std::multiset<TimePoint> model;
    int64_t clock = 0;
    for (int step = 0; step < 4000; ++step) {
      const int what = static_cast<int>(rng() % 10);
      if (what < 5 || model.empty()) {
        // Mostly in order (arrival plus a fixed timeout), sometimes earlier (a client's nearer
        // deadline), sometimes equal to one queued.
        clock += static_cast<int64_t>(rng() % 3);
        int64_t at = clock + 1000;
        if (rng() % 4 == 0) at -= static_cast<int64_t>(rng() % 2000);
        set.insert(At(at));
        model.insert(At(at));
      } else if (what < 8) {
        set.erase(*model.begin());  // the earliest: what a FIFO batch takes
        model.erase(model.begin());
      } else {
        auto it = std::next(model.begin(), static_cast<std::ptrdiff_t>(rng() % model.size()));
        set.erase(*it);
        model.erase(it);
      }
      ASSERT_EQ(set.size(), model.size()) << "seed " << seed << " round " << round;
      ASSERT_EQ(set.empty(), model.empty()) << "seed " << seed;
      if (!model.empty()) {
        ASSERT_EQ(set.earliest(), *model.begin())
            << "seed " << seed << " round " << round << " step " << step;
      }
    }
    // Drained by earliest: every element comes out in order.
    while (!model.empty()) {
      ASSERT_EQ(set.earliest(), *model.begin()) << "seed " << seed;
      set.erase(*model.begin());
      model.erase(model.begin());
    }
    ASSERT_TRUE(set.empty()) << "seed " << seed;
  }
}

TEST(DeadlineSet, PastTheArraysSizeItMatchesAMultisetAsATreeAndComesBackWhenEmptied) {
  // A queue far longer than the array (max_queue_size allows 10^7) with mixed timeouts: inserts
  // near the front and removals from the middle stay O(log n) in the tree.
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  DeadlineSet set;
  std::multiset<TimePoint> model;
  const size_t fill = DeadlineSet::kMaxArray * 2 + 17;
  for (size_t i = 0; i < fill; ++i) {
    const TimePoint at = At(static_cast<int64_t>(rng() % 100000));
    set.insert(at);
    model.insert(at);
    if (i + 1 > DeadlineSet::kMaxArray) ASSERT_TRUE(set.in_tree()) << "seed " << seed;
    ASSERT_EQ(set.earliest(), *model.begin()) << "seed " << seed << " insert " << i;
  }
  ASSERT_EQ(set.size(), model.size());
  while (!model.empty()) {
    auto it = std::next(model.begin(), static_cast<std::ptrdiff_t>(rng() % model.size()));
    set.erase(*it);
    model.erase(it);
    ASSERT_EQ(set.size(), model.size()) << "seed " << seed;
    if (!model.empty()) ASSERT_EQ(set.earliest(), *model.begin()) << "seed " << seed;
  }
  EXPECT_TRUE(set.empty());
  EXPECT_FALSE(set.in_tree()) << "emptied: back to the array";
  set.insert(At(3));
  set.insert(At(1));
  EXPECT_FALSE(set.in_tree());
  EXPECT_EQ(set.earliest(), At(1));
}

}  // namespace
}  // namespace torchfarm
