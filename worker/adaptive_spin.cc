#include "worker/adaptive_spin.h"

#include <algorithm>

namespace torchfarm::worker {

AdaptiveSpin::Micros AdaptiveSpin::typical_gap() const {
  const size_t n = std::min(recorded_, kWindow);
  if (n == 0) return Micros(0);
  std::array<Micros, kWindow> sorted = gaps_;
  std::nth_element(sorted.begin(), sorted.begin() + n / 2, sorted.begin() + n);
  return sorted[n / 2];
}

AdaptiveSpin::Micros AdaptiveSpin::Budget() const {
  if (max_spin_.count() == 0 || backoff_left_ > 0) return Micros(0);
  // With no history yet, try: the first gaps decide.
  return typical_gap() < max_spin_ ? max_spin_ : Micros(0);
}

void AdaptiveSpin::Record(Micros gap, bool polled, bool preempted) {
  gaps_[recorded_ % kWindow] = gap;
  ++recorded_;
  if (!polled) return;
  if (preempted) {
    ++preempted_polls_;
    backoff_left_ = next_backoff_;
    next_backoff_ = std::min(next_backoff_ * 2, kMaxBackoffPasses);
  } else {
    next_backoff_ = 1;
  }
}

void AdaptiveSpin::SkipPass() {
  if (backoff_left_ > 0) --backoff_left_;
}

}  // namespace torchfarm::worker
