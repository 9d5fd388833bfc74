#include "supervisor/loop/loop_timer.h"

#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace torchfarm {

Status LoopTimer::Open() {
  int fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd < 0) return Internal(std::string("timerfd_create failed: ") + std::strerror(errno));
  fd_ = UniqueFd(fd);
  // The default 50 us timer slack would be most of a 100-200 us batch delay.
  ::prctl(PR_SET_TIMERSLACK, 5'000UL);  // 5 us
  return Status::Ok();
}

void LoopTimer::ArmAt(TimePoint when) {
  if (when == armed_at_ || !fd_.valid()) return;
  armed_at_ = when;
  // steady_clock is CLOCK_MONOTONIC on Linux; 0 would disarm, so the earliest is 1 ns.
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count();
  if (ns <= 0) ns = 1;
  itimerspec spec{};
  spec.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  spec.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  ::timerfd_settime(fd_.get(), TFD_TIMER_ABSTIME, &spec, nullptr);
}

void LoopTimer::Acknowledge() {
  uint64_t expirations = 0;
  ssize_t n = ::read(fd_.get(), &expirations, sizeof(expirations));
  (void)n;  // EAGAIN: not expired (a spurious wake-up); either way the fd is drained
  armed_at_ = TimePoint::max();
}

}  // namespace torchfarm
