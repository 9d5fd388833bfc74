// DeadlineSet: the finite deadlines of a model's queued requests, as a sorted multiset, so the
// earliest is known exactly after any request leaves (ModelQueue's batch urgency, NextDue and
// expiry).
//
// Kept as a sorted array with a moving front, not a tree: deadlines mostly arrive in order (each
// is its arrival plus a timeout the model or the client set) and mostly leave from the front (the
// oldest request goes first), so both ends cost O(1) and neither allocates once the array has
// grown to the queue's length. An out-of-order insert or a removal from the middle (fair queueing
// serving another client first, a request that expired behind others) shifts the elements after
// it: O(n), n at most max_queue_size. std::multiset cost ~200 instructions a request for its node
// and rebalancing (issue 36). Header-only; one thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "common/clock.h"

namespace torchfarm {

class DeadlineSet {
 public:
  void insert(TimePoint deadline) {
    if (empty() || deadline >= points_.back()) {
      points_.push_back(deadline);
      return;
    }
    points_.insert(std::upper_bound(points_.begin() + static_cast<std::ptrdiff_t>(front_),
                                    points_.end(), deadline),
                   deadline);
  }
  // Removes one element equal to `deadline`, which must be present.
  void erase(TimePoint deadline) {
    if (points_[front_] == deadline) {
      ++front_;
      if (front_ == points_.size()) {
        clear();  // empty: start again at the array's start (no shift)
      } else if (front_ >= kCompactAt && front_ * 2 >= points_.size()) {
        // The dead front outgrew the live part: shift the live part down, once per ~front_ pops.
        points_.erase(points_.begin(), points_.begin() + static_cast<std::ptrdiff_t>(front_));
        front_ = 0;
      }
      return;
    }
    points_.erase(std::lower_bound(points_.begin() + static_cast<std::ptrdiff_t>(front_),
                                   points_.end(), deadline));
  }
  bool empty() const { return front_ == points_.size(); }
  size_t size() const { return points_.size() - front_; }
  // The earliest deadline (the set must not be empty).
  TimePoint earliest() const { return points_[front_]; }
  void clear() {
    points_.clear();
    front_ = 0;
  }

 private:
  static constexpr size_t kCompactAt = 64;
  std::vector<TimePoint> points_;  // [front_, end) sorted; [0, front_) removed
  size_t front_ = 0;
};

}  // namespace torchfarm
