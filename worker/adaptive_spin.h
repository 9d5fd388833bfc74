// When the worker's compute thread polls its request ring instead of sleeping on the doorbell:
// a pure policy over what the last idle gaps looked like, unit-tested without a worker.
//
// A poll that finds the next request saves two sleeping wake-ups (the worker's and, in effect,
// the supervisor's wait on the answer) on the round trip; a poll that finds nothing burns a core.
// So the worker polls, up to `max_spin_us` (instances[].idle_spin_us), only while
//   - the recent gaps between finishing a pass and the next request arriving (their median over
//     the last kWindow) are shorter than max_spin_us: a client sending back-to-back requests; an
//     idle or bursty farm sleeps at once; and
//   - its polling was not preempted: a spinner the scheduler had to take off its core competes
//     with the threads that produce its work (the supervisor, the other workers), which on a
//     saturated machine costs throughput. After a preempted poll, polling stops for a number of
//     passes that doubles with each such poll (up to kMaxBackoffPasses) and resets after a poll
//     that ran undisturbed.
// Runs on the worker's compute thread only.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace torchfarm::worker {

class AdaptiveSpin {
 public:
  using Micros = std::chrono::microseconds;
  static constexpr size_t kWindow = 8;
  static constexpr uint32_t kMaxBackoffPasses = 1024;

  explicit AdaptiveSpin(int max_spin_us) : max_spin_(max_spin_us > 0 ? max_spin_us : 0) {}

  // How long to poll before sleeping after a pass that did work; 0: sleep at once.
  Micros Budget() const;
  // The idle gap that just ended: how long after the pass the next request arrived (or how long
  // the worker slept without one: a timeout counts as a long gap). `polled`: the worker polled
  // during it; `preempted`: it lost its core while polling.
  void Record(Micros gap, bool polled, bool preempted);
  // One pass that did work went by without polling (backoff counts these).
  void SkipPass();

  Micros typical_gap() const;
  uint32_t backoff_passes() const { return backoff_left_; }
  uint64_t preempted_polls() const { return preempted_polls_; }

 private:
  const Micros max_spin_;
  std::array<Micros, kWindow> gaps_{};
  size_t recorded_ = 0;  // gaps recorded so far (the window holds the last kWindow)
  uint32_t backoff_left_ = 0;
  uint32_t next_backoff_ = 1;
  uint64_t preempted_polls_ = 0;
};

}  // namespace torchfarm::worker
