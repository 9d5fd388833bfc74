// DeadlineSet: the finite deadlines of a model's queued requests, as a sorted multiset, so the
// earliest is known exactly after any request leaves (ModelQueue's batch urgency, NextDue and
// expiry).
//
// Kept as a sorted array with a moving front while it is small, not a tree: deadlines mostly
// arrive in order (each is its arrival plus a timeout the model or the client set) and mostly
// leave from the front (the oldest request goes first), so both ends cost O(1) and neither
// allocates once the array has grown to the queue's length. An out-of-order insert or a removal
// from the middle (fair queueing serving another client first, a request that expired behind
// others) shifts the elements after it: O(n), so past kMaxArray deadlines (max_queue_size goes up
// to 10^7) the set moves into a std::multiset, O(log n) each way, until it empties again.
// std::multiset alone cost ~200 instructions a request for its node and rebalancing (issue 36).
// Header-only; one thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <set>
#include <vector>

#include "common/clock.h"

namespace torchfarm {

class DeadlineSet {
 public:
  // The most deadlines the array holds before the set becomes a tree (a shift of at most ~32 KiB).
  static constexpr size_t kMaxArray = 4096;

  void insert(TimePoint deadline) {
    if (!tree_.empty()) {
      tree_.insert(deadline);
      return;
    }
    if (size() >= kMaxArray) {
      tree_.insert(points_.begin() + static_cast<std::ptrdiff_t>(front_), points_.end());
      points_.clear();
      front_ = 0;
      tree_.insert(deadline);
      return;
    }
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
    if (!tree_.empty()) {
      tree_.erase(tree_.find(deadline));  // emptied: the array serves again (it is empty)
      return;
    }
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
  bool empty() const { return tree_.empty() && front_ == points_.size(); }
  size_t size() const { return tree_.empty() ? points_.size() - front_ : tree_.size(); }
  // The earliest deadline (the set must not be empty).
  TimePoint earliest() const { return tree_.empty() ? points_[front_] : *tree_.begin(); }
  void clear() {
    points_.clear();
    front_ = 0;
    tree_.clear();
  }
  // Whether the deadlines are in the tree (tests).
  bool in_tree() const { return !tree_.empty(); }

 private:
  static constexpr size_t kCompactAt = 64;
  std::vector<TimePoint> points_;  // [front_, end) sorted; [0, front_) removed; empty in tree mode
  size_t front_ = 0;
  std::multiset<TimePoint> tree_;  // every deadline, while there are more than kMaxArray
};

}  // namespace torchfarm
