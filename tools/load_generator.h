// The engine of `torchfarm bench`: C clients, each its own ZeroMQ DEALER socket (so the farm sees
// C peers), spread over a few generator threads that multiplex their clients with zmq_poll.
//
// Owns: one ZeroMQ context, the generator threads and their sockets, the random input pool, and
// the results of one step. Runs in the CLI process; Start() spawns the threads, Finish() joins
// them. The pool is written before the threads start and only read afterwards.
//
// Two modes per step:
//   closed loop (rate == 0): each client keeps `depth` requests in flight and sends the next the
//     moment a reply arrives. Latency = reply arrival - send.
//   open loop (rate > 0): requests leave on a schedule (rate/threads per thread, round robin
//     over that thread's clients, any number in flight), woken by a timerfd so sub-millisecond
//     intervals do not spin; the gaps are even (`arrival` fixed) or drawn (poisson, gamma with a
//     chosen cv: tools/arrival_process.h). Latency = reply arrival - *scheduled* send time, so a
//     stalled server or generator cannot hide queueing delay (no coordinated omission).
//
// Timeline: Start, warm-up (replies not counted), measurement window [measure_begin,
// measure_end), then a drain of the replies still outstanding (not counted). Only replies that
// arrive inside the window count, toward throughput, latency and errors alike.
//
// Inputs: every request carries fresh bytes: a window of a random pool at a random offset, with
// its first element stamped with a per-request counter, copied into the message before the
// latency clock starts (closed loop; the open loop counts from the scheduled time).
//
// Shared memory (`shm`, closed loop only): each client owns one region of `depth` areas
// (BenchShmRegions); a request's inputs are copied into a free area of its client's region instead
// of data frames, before the clock starts just as above, and the request names that area's output
// range as output_shm. A reply must place its outputs in that range (else it counts as the error
// SHM_OUTPUT_OUT_OF_RANGE); the area is free again once its reply arrived or it expired.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/tensor_spec.h"
#include "tools/arrival_process.h"
#include "tools/bench_inputs.h"
#include "tools/bench_protocol.h"
#include "tools/bench_shm_regions.h"

namespace zmq {
class context_t;
}  // namespace zmq

namespace torchfarm {

struct LoadSpec {
  std::string endpoint;
  std::string model;
  std::vector<TensorSpec> inputs;
  int concurrency = 1;  // clients, one DEALER socket each
  int depth = 1;        // closed loop: requests in flight per client
  double rate = 0;      // > 0: open loop, requests/s over all clients
  Arrival arrival = Arrival::kFixed;  // open loop: how the gaps between sends are drawn
  double cv = 1;                      // kGamma: coefficient of variation of the gaps
  double slo_ms = 0;                  // > 0: count ok replies within this latency (goodput)
  // With slo_ms: each request carries deadline_unix_us = its start (the scheduled send in the
  // open loop) + slo_ms on the wall clock (docs/protocol.md).
  bool client_deadline = false;
  double warmup_s = 1;
  double seconds = 5;
  int64_t max_requests = 0;   // > 0: the window ends after this many counted replies
  int threads = 1;            // generator threads; clients are dealt round robin
  int io_threads = 1;         // ZeroMQ I/O threads of the generator's context
  int io_timeout_ms = 10000;  // a request unanswered this long counts as NO_REPLY
  int64_t timeout_ms = 0;     // server-side deadline sent in each request (0: none)
  uint64_t seed = 1;
  bool shm = false;               // inputs and outputs in client shared memory (closed loop)
  uint64_t shm_output_bytes = 0;  // each request's output range; 0: the inputs' size
};

// Percentiles of the counted replies, in microseconds.
struct LatencySummary {
  int64_t count = 0;
  double min_us = 0, mean_us = 0, p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
};
// Nearest-rank percentiles of `nanos` (sorted in place).
LatencySummary Summarize(std::vector<int64_t>* nanos);

struct StepResult {
  int64_t sent = 0;  // requests sent during the whole step (warm-up and drain included)
  int64_t ok = 0;    // ok replies inside the window
  std::map<std::string, int64_t> errors;  // code -> count inside the window
  int64_t error_count = 0;
  double window_s = 0;        // the window's actual length
  double requests_per_s = 0;  // (ok + errors) / window_s
  double ok_per_s = 0;
  LatencySummary latency;        // ok replies only
  // slo_ms > 0: ok replies inside the window whose latency was at most slo_ms, and per second
  // (goodput); -1 without an SLO.
  int64_t within_slo = -1;
  double within_slo_per_s = -1;
  double reply_bytes_per_s = 0;  // data frames of ok replies
  // Means over ok replies of the reply's timing_us fields (-1 when no reply carried them).
  double server_queue_us = -1, server_compute_us = -1, server_total_us = -1;
  // Open loop: how late sends left against their schedule (generator saturation shows here).
  LatencySummary send_lag;
  // --shm: bytes of each client's region, and how releasing the regions at the end went.
  uint64_t shm_region_bytes = 0;
  Status shm_release;
  // The latencies behind `latency` (ok replies, nanoseconds, sorted), so results of generators
  // that ran side by side (`bench --clients`) merge into exact percentiles.
  std::vector<int64_t> latencies_ns;
};

// The results of generators that ran side by side over the same window (one per client of
// `bench --clients`) as one step: counts and rates summed, percentiles over every reply, the
// server's means weighted by ok replies, the send lag of the client whose p99 lag was worst.
// `slo_ms` > 0 sums within_slo.
StepResult MergeStepResults(const std::vector<StepResult>& parts, double slo_ms);

class LoadGenerator {
 public:
  explicit LoadGenerator(LoadSpec spec);
  ~LoadGenerator();
  LoadGenerator(const LoadGenerator&) = delete;
  LoadGenerator& operator=(const LoadGenerator&) = delete;

  // Connects the clients (with shm: creates their regions) and starts the threads. Fails on a bad
  // endpoint or spec, or a region that cannot be created or mapped here.
  Status Start();
  // Blocks until the measurement window ends (by time or by max_requests).
  void WaitMeasureEnd();
  // Joins the threads after their drain, merges their results and releases the regions.
  StepResult Finish();

  TimePoint measure_begin() const { return measure_begin_; }
  TimePoint measure_end() const { return measure_end_; }

  struct ThreadState;  // defined in load_generator.cc

 private:
  // shm: one region per client, and every area free.
  Status CreateShmRegions();
  void RunThread(ThreadState* state);
  void RunClosedLoop(ThreadState* state);
  void RunOpenLoop(ThreadState* state);
  void Drain(ThreadState* state);
  // Sends one request on `client`. Its latency counts from `scheduled` (open loop), or else from
  // the moment its inputs are in place.
  void SendRequest(ThreadState* state, size_t client, std::optional<TimePoint> scheduled);
  // Builds request `id` in state->frames: inputs copied into data frames, or (shm) into a free
  // area of the client's region, whose number goes to `*area`. False when no area is free.
  bool BuildRequest(ThreadState* state, size_t client, uint64_t id, TimePoint start, int* area);
  // Reads every reply waiting on `client`; in the closed loop each one is replaced by a new
  // request while the window is open.
  void HandleReplies(ThreadState* state, size_t client, bool resend);
  // Counts requests unanswered for io_timeout_ms as NO_REPLY; returns their clients.
  std::vector<size_t> ExpireOutstanding(ThreadState* state, TimePoint now);
  void Record(ThreadState* state, TimePoint now, TimePoint start, const ScannedReply& reply,
              int64_t data_bytes);
  bool InWindow(TimePoint now) const;

  LoadSpec spec_;
  InputPool pool_;
  RequestTemplate template_;
  // The wall clock minus the steady clock, in microseconds, read once: a start on the steady
  // clock plus this is the same instant on the wall clock (spec_.client_deadline).
  int64_t wall_minus_steady_us_ = 0;
  std::unique_ptr<BenchShmRegions> shm_;  // with spec_.shm
  std::unique_ptr<zmq::context_t> context_;
  std::vector<std::unique_ptr<ThreadState>> states_;
  std::vector<std::thread> threads_;
  TimePoint start_{}, measure_begin_{}, measure_end_{};
  std::atomic<int64_t> counted_{0};
  std::atomic<bool> stop_early_{false};
  std::atomic<int64_t> stopped_at_ns_{0};
};

}  // namespace torchfarm
