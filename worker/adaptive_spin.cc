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
  if (max_spin_.count() == 0 || machine_busy()) return Micros(0);
  // With no history yet, try: the first gaps decide.
  return typical_gap() < max_spin_ ? max_spin_ : Micros(0);
}

void AdaptiveSpin::Record(Micros gap) {
  gaps_[recorded_ % kWindow] = gap;
  ++recorded_;
}

void AdaptiveSpin::NoteLoad(int runnable, int cores) {
  busy_samples_ = runnable > cores ? std::min(busy_samples_ + 1, kBusySamples) : 0;
}

}  // namespace torchfarm::worker
