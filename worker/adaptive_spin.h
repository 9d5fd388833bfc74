// When the worker's compute thread polls its request ring instead of sleeping on the doorbell:
// a pure policy over what the last idle gaps and the machine's load looked like, unit-tested
// without a worker.
//
// A poll that finds the next request saves two sleeping wake-ups (the worker's and, in effect,
// the supervisor's wait on the answer) on the round trip; a poll that finds nothing burns a core.
// So the worker polls, up to `max_spin_us` (instances[].idle_spin_us), only while
//   - the recent gaps between finishing a pass and the next request arriving (their median over
//     the last kWindow) are shorter than max_spin_us: a client sending back-to-back requests; an
//     idle or bursty farm sleeps at once; and
//   - the machine has a core to spare: the last samples of runnable threads (/proc/loadavg, taken
//     by the caller every few milliseconds) were not more than the cores this worker may use. On
//     a saturated machine a poll takes CPU from the threads that produce its work (the
//     supervisor, the other workers) and costs throughput.
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
  // Busy samples in a row (each of them more runnable threads than cores) that stop polling; one
  // sample with room brings it back.
  static constexpr int kBusySamples = 2;

  explicit AdaptiveSpin(int max_spin_us) : max_spin_(max_spin_us > 0 ? max_spin_us : 0) {}

  // How long to poll before sleeping after a pass that did work; 0: sleep at once.
  Micros Budget() const;
  // The idle gap that just ended: how long after the pass the next request arrived (or how long
  // the worker slept without one: a timeout counts as a long gap).
  void Record(Micros gap);
  // A sample of the machine's load: threads running or runnable now (this one included) against
  // the cores this worker may run on.
  void NoteLoad(int runnable, int cores);

  Micros typical_gap() const;
  bool machine_busy() const { return busy_samples_ >= kBusySamples; }

 private:
  const Micros max_spin_;
  std::array<Micros, kWindow> gaps_{};
  size_t recorded_ = 0;  // gaps recorded so far (the window holds the last kWindow)
  int busy_samples_ = 0;
};

}  // namespace torchfarm::worker
