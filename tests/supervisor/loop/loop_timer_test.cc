// The loop's timerfd (supervisor/loop/loop_timer.h): it fires no earlier than armed, a past time
// fires at once, re-arming replaces the time, and an acknowledged timer is quiet. Lower bounds
// only: how soon after its time it fires is measured in bench (issue 15 case 4), never asserted
// here.
#include "supervisor/loop/loop_timer.h"

#include <poll.h>

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

bool Readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

TEST(LoopTimerTest, FiresNoEarlierThanArmedAndOnlyOnce) {
  LoopTimer timer;
  ASSERT_TRUE(timer.Open().ok());
  EXPECT_FALSE(Readable(timer.fd(), 0)) << "unarmed";
  const TimePoint armed = Clock::now() + Millis(20);
  timer.ArmAt(armed);
  EXPECT_EQ(timer.armed_at(), armed);
  ASSERT_TRUE(Readable(timer.fd(), 5'000));
  EXPECT_GE(Clock::now(), armed);
  timer.Acknowledge();
  EXPECT_EQ(timer.armed_at(), TimePoint::max());
  EXPECT_FALSE(Readable(timer.fd(), 30)) << "one expiry per arming";
}

TEST(LoopTimerTest, APastTimeFiresAtOnceAndReArmingReplacesTheTime) {
  LoopTimer timer;
  ASSERT_TRUE(timer.Open().ok());
  timer.ArmAt(Clock::now() - Millis(5));
  EXPECT_TRUE(Readable(timer.fd(), 5'000));
  timer.Acknowledge();
  timer.ArmAt(Clock::now() + std::chrono::hours(1));
  timer.ArmAt(Clock::now() + Millis(10));  // earlier: replaces the hour
  EXPECT_TRUE(Readable(timer.fd(), 5'000));
  timer.Acknowledge();
  timer.ArmAt(Clock::now() + Millis(10));
  timer.ArmAt(Clock::now() + std::chrono::hours(1));  // later: replaces the 10 ms
  EXPECT_FALSE(Readable(timer.fd(), 100));
}

}  // namespace
}  // namespace torchfarm
