// When the worker's compute thread polls its request ring instead of sleeping on the doorbell:
// a pure policy over what the last idle gaps looked like, unit-tested without a worker.
//
// A poll that finds the next request saves two sleeping wake-ups (the worker's and, in effect,
// the supervisor's wait on the answer) on the round trip; a poll that finds nothing burns a core.
// So the worker polls, up to `max_spin_us` (instances[].idle_spin_us), only while
//   - the recent gaps between finishing a pass and the next request arriving (their median over
//     the last kWindow) are shorter than max_spin_us: a client sending back-to-back requests; an
//     idle or bursty farm sleeps at once; and
//   - the worker's core is its own: a thread the scheduler had to take off its core (while it
//     polled, or while it ran the pass before) shares the machine with more runnable threads than
//     cores, and a poll there would take CPU from the threads that produce its work (the
//     supervisor, the other workers): on a saturated machine that costs throughput. After such a
//     preemption, polling stops for a number of passes that doubles with each one (up to
//     kMaxBackoffPasses) and starts over at one after a pass and poll that ran undisturbed.
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

  // A pass that did work just ended; `preempted`: the thread lost its core during it.
  void NotePass(bool preempted);
  // How long to poll before sleeping after that pass; 0: sleep at once.
  Micros Budget() const;
  // The idle gap that just ended: how long after the pass the next request arrived (or how long
  // the worker slept without one: a timeout counts as a long gap). `polled`: the worker polled
  // during it; `preempted`: it lost its core while polling.
  void Record(Micros gap, bool polled, bool preempted);

  Micros typical_gap() const;
  uint32_t backoff_passes() const { return backoff_left_; }
  uint64_t preemptions() const { return preemptions_; }

 private:
  const Micros max_spin_;
  std::array<Micros, kWindow> gaps_{};
  size_t recorded_ = 0;  // gaps recorded so far (the window holds the last kWindow)
  uint32_t backoff_left_ = 0;
  uint32_t next_backoff_ = 1;
  uint64_t preemptions_ = 0;

  void Preempted();
};

}  // namespace torchfarm::worker
