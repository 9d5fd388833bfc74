// EndpointPool on simulated time: spreading, ejection, probing with backoff, refusals.
#include "torchfarm/endpoint_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace torchfarm {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

EndpointPoolOptions Options() {
  EndpointPoolOptions o;
  o.heartbeat = Millis(100);
  o.eject_after = Millis(300);
  o.probe_backoff = Millis(50);
  o.max_probe_backoff = Millis(150);
  o.refusal_cooldown = Millis(200);
  return o;
}

const std::vector<bool> kNone;

TEST(EndpointPoolTest, PicksFewestOutstandingRoundRobinOnTies) {
  FakeTimeSource time;
  EndpointPool pool(3, Options());
  std::vector<int> picks;
  for (int i = 0; i < 6; ++i) picks.push_back(pool.Pick(kNone, time.Now()));
  EXPECT_THAT(picks, ElementsAre(0, 1, 2, 0, 1, 2));  // nothing outstanding: take turns

  pool.OnRequestSent(0, time.Now());
  pool.OnRequestSent(0, time.Now());
  pool.OnRequestSent(2, time.Now());
  EXPECT_EQ(pool.Pick(kNone, time.Now()), 1);
  pool.OnRequestSent(1, time.Now());
  EXPECT_EQ(pool.Pick(kNone, time.Now()), 2) << "1 and 2 tie at one each; the cursor is past 1";
}

TEST(EndpointPoolTest, LeastLoadedWinsOverTheCursor) {
  FakeTimeSource time;
  EndpointPool pool(2, Options());
  pool.OnRequestSent(1, time.Now());
  EXPECT_EQ(pool.Pick(kNone, time.Now()), 0);
  pool.OnRequestSent(0, time.Now());
  pool.OnRequestSent(0, time.Now());
  EXPECT_EQ(pool.Pick(kNone, time.Now()), 1);
  pool.OnRequestDone(0);
  pool.OnRequestDone(0);
  EXPECT_EQ(pool.Pick(kNone, time.Now()), 0);
}

TEST(EndpointPoolTest, IdleEndpointIsNeverEjected) {
  FakeTimeSource time;
  EndpointPool pool(1, Options());
  time.Advance(std::chrono::seconds(10));
  EndpointPool::Due due = pool.Tick(time.Now());
  EXPECT_THAT(due.eject, IsEmpty());
  EXPECT_THAT(due.probe, IsEmpty());
  EXPECT_FALSE(pool.NextDeadline());
}

TEST(EndpointPoolTest, BusyQuietEndpointIsProbedThenEjected) {
  FakeTimeSource time;
  EndpointPool pool(2, Options());
  pool.OnRequestSent(0, time.Now());
  EXPECT_EQ(*pool.NextDeadline(), time.Now() + Millis(100));
  time.Advance(Millis(99));
  EXPECT_THAT(pool.Tick(time.Now()).probe, IsEmpty());
  time.Advance(Millis(1));
  EXPECT_THAT(pool.Tick(time.Now()).probe, ElementsAre(0));
  pool.OnProbeSent(0, time.Now());
  EXPECT_THAT(pool.Tick(time.Now()).probe, IsEmpty()) << "one probe per heartbeat";
  time.Advance(Millis(199));
  EndpointPool::Due due = pool.Tick(time.Now());
  EXPECT_THAT(due.eject, IsEmpty());
  EXPECT_THAT(due.probe, ElementsAre(0));
  pool.OnProbeSent(0, time.Now());
  time.Advance(Millis(1));
  due = pool.Tick(time.Now());
  EXPECT_THAT(due.eject, ElementsAre(0));
  EXPECT_EQ(pool.state(0), EndpointPool::State::kEjected);
  EXPECT_EQ(pool.outstanding(0), 0);
  EXPECT_EQ(pool.live_count(), 1);
  EXPECT_EQ(pool.Pick(kNone, time.Now()), 1);
}

TEST(EndpointPoolTest, AnyMessageRestartsTheSilenceClock) {
  FakeTimeSource time;
  EndpointPool pool(1, Options());
  pool.OnRequestSent(0, time.Now());
  pool.OnRequestSent(0, time.Now());
  time.Advance(Millis(250));
  EXPECT_FALSE(pool.OnMessage(0, time.Now()));  // a probe answer, say
  time.Advance(Millis(250));
  EXPECT_THAT(pool.Tick(time.Now()).eject, IsEmpty());
  pool.OnRequestDone(0);
  pool.OnRequestDone(0);
  time.Advance(Millis(1000));
  EXPECT_THAT(pool.Tick(time.Now()).eject, IsEmpty()) << "owes nothing any more";
}

TEST(EndpointPoolTest, EjectedEndpointIsProbedWithDoublingBackoffAndReadmitted) {
  FakeTimeSource time;
  EndpointPool pool(2, Options());
  ASSERT_TRUE(pool.Eject(0, time.Now()));
  EXPECT_FALSE(pool.Eject(0, time.Now()));
  std::vector<int64_t> probe_times;
  const TimePoint start = time.Now();
  for (int ms = 0; ms <= 700; ++ms) {
    for (int e : pool.Tick(time.Now()).probe) {
      EXPECT_EQ(e, 0);
      pool.OnProbeSent(e, time.Now());
      probe_times.push_back(std::chrono::duration_cast<Millis>(time.Now() - start).count());
    }
    time.Advance(Millis(1));
  }
  // 50, then +50 (the first backoff is used once as the delay to the first probe), +100, +150 cap.
  EXPECT_THAT(probe_times, ElementsAre(50, 100, 200, 350, 500, 650));
  EXPECT_TRUE(pool.OnMessage(0, time.Now()));
  EXPECT_EQ(pool.state(0), EndpointPool::State::kLive);
  EXPECT_THAT(pool.Tick(time.Now()).probe, IsEmpty());
}

TEST(EndpointPoolTest, RefusingEndpointComesLastAndExcludedEndpointsAreSkipped) {
  FakeTimeSource time;
  EndpointPool pool(2, Options());
  pool.OnRefused(0, time.Now());
  EXPECT_EQ(pool.Pick(kNone, time.Now()), 1);
  pool.OnRequestSent(1, time.Now());
  pool.OnRequestSent(1, time.Now());
  EXPECT_EQ(pool.Pick(kNone, time.Now()), 1) << "cooling down beats fewer outstanding";
  time.Advance(Millis(200));
  EXPECT_EQ(pool.Pick(kNone, time.Now()), 0);

  EXPECT_EQ(pool.Pick({true, false}, time.Now()), 1);
  EXPECT_EQ(pool.Pick({true, true}, time.Now()), EndpointPool::kAllRefused);
  pool.Eject(1, time.Now());
  EXPECT_EQ(pool.Pick({true, false}, time.Now()), EndpointPool::kAllRefused);
  pool.Eject(0, time.Now());
  EXPECT_EQ(pool.Pick(kNone, time.Now()), EndpointPool::kNoneLive);
}

}  // namespace
}  // namespace torchfarm
