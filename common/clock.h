// Injectable monotonic time.
//
// Owns: the one notion of "now" used wherever liveness, deadlines, backoff and batch delays are
// decided, so tests can advance a FakeClock instead of sleeping. Single-threaded use per instance.
#pragma once

#include <chrono>

namespace torchfarm {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Micros = std::chrono::microseconds;
using Millis = std::chrono::milliseconds;

class TimeSource {
 public:
  virtual ~TimeSource() = default;
  virtual TimePoint Now() const = 0;
};

class SteadyTimeSource final : public TimeSource {
 public:
  TimePoint Now() const override { return Clock::now(); }
};

class FakeTimeSource final : public TimeSource {
 public:
  TimePoint Now() const override { return now_; }
  void Advance(Clock::duration d) { now_ += d; }

 private:
  TimePoint now_{std::chrono::seconds(1000)};
};

inline int64_t ToMicros(Clock::duration d) {
  return std::chrono::duration_cast<Micros>(d).count();
}

}  // namespace torchfarm
