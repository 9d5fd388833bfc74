// The supervisor loop's one timer: a timerfd in the poll set, armed to the next due time (a batch
// delay, a deadline, a restart, a liveness check), so the loop wakes within microseconds of it
// instead of rounding its poll timeout up to a millisecond, and never spins.
//
// Owns: the timerfd (closed with the object). Runs on the supervisor's loop thread.
#pragma once

#include "common/clock.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace torchfarm {

class LoopTimer {
 public:
  Status Open();
  int fd() const { return fd_.get(); }
  // Fires at `when` (steady clock, absolute); a time already past fires at once. Re-arming
  // replaces the previous time.
  void ArmAt(TimePoint when);
  // Consumes an expiry so the fd stops being readable.
  void Acknowledge();
  TimePoint armed_at() const { return armed_at_; }

 private:
  UniqueFd fd_;
  TimePoint armed_at_ = TimePoint::max();
};

}  // namespace torchfarm
