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

void AdaptiveSpin::Preempted() {
  ++preemptions_;
  backoff_left_ = next_backoff_;
  next_backoff_ = std::min(next_backoff_ * 2, kMaxBackoffPasses);
}

void AdaptiveSpin::NotePass(bool preempted) {
  if (preempted) {
    Preempted();
  } else if (backoff_left_ > 0) {
    --backoff_left_;
  }
}

void AdaptiveSpin::Record(Micros gap, bool polled, bool preempted) {
  gaps_[recorded_ % kWindow] = gap;
  ++recorded_;
  if (polled && preempted) {
    Preempted();
  } else if (polled && backoff_left_ == 0) {
    next_backoff_ = 1;  // a pass and a poll undisturbed: the machine has room again
  }
}

}  // namespace torchfarm::worker
