// One place in the farm for a worker process: the table row that outlives each process in it.
//
// Owns: the current child pid, its shared-memory segment (unlinked when the process is gone),
// both doorbells, the batches it holds, its restart history and the counters from its heartbeats.
// Runs on the supervisor's loop thread only.
//
// States; every change goes through the private TransitionTo, which checks kTransitions and logs
// "slot pid from->to why". Every transient state has a deadline (NextDeadline):
//
//            launch               ready
//   kStopped ------> kStarting --------> kReady
//      ^  ^             | | \              |  retire / graceful restart (no new batches)
//      |  |        exit | |  \ retire      v
//      |  |             | |   +-------> kDraining --idle: stop sent--> kStopping --exit--+
//      |  |             v v                 |                          (stop deadline:   |
//      |  |  restart_at  kBackoff <---------+--- exit (crash, kill) ------ SIGKILL)      |
//      |  |  +---------- (restart_policy.h)                                              |
//      |  |  | launch     |  start failures > max_restarts in window                     |
//      |  |  v            v                                                              |
//      |  | kStarting   kFailed --failed_retry cool-down--> kStarting                    |
//      |  +------------------------------------------------------------------------------+
//      +-- retired or farm stopping, from any state once the process is gone
//   (kStopped -> kBackoff: the first launch failed before a process existed)
//
// Deadlines: kStarting, kReady and kDraining: heartbeats (kStartupGrace before the hello) and
// hang_timeout_ms of the running batch; kStopping: kStopGrace, then SIGKILL; kBackoff and kFailed:
// restart_at.
//
// The worker is an untrusted writer of its segment (ipc/protocol_violation.h): the slot keeps the
// request ring's head and the response ring's tail in its own memory, checks every index the worker
// writes (request_tail here, response_head in PinnedResponseRing) and every response header
// (ResponseHandler, ipc/slot_codec.h) before use. A violation kills the process (SIGKILL, logged
// once with the field, the value and the bound); its batches stay in flight, so its exit requeues
// them like a crash's (poison rules apply) and the slot restarts as after a crash.
//
// GPU slots: an exit caused by an unusable device counts as a GPU failure; after the instance's
// gpu_failures_before_fallback of them (and with fallback "cpu") the slot relaunches on the CPU.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/config.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "ipc/doorbell.h"
#include "ipc/protocol_violation.h"
#include "ipc/slot_codec.h"
#include "ipc/worker_segment.h"
#include "supervisor/intake/pending_request.h"
#include "supervisor/intake/shm_budget.h"
#include "supervisor/workers/pinned_response_ring.h"
#include "supervisor/workers/restart_policy.h"
#include "supervisor/workers/worker_launcher.h"

namespace torchfarm {

enum class SlotState { kStarting, kReady, kDraining, kStopping, kBackoff, kFailed, kStopped };
const char* SlotStateName(SlotState state);
// Whether the state machine allows from -> to (a same-state change is always allowed).
bool SlotTransitionAllowed(SlotState from, SlotState to);

struct InflightBatch {
  uint64_t batch_id = 0;
  std::vector<HeldRequest> requests;  // never null
  int64_t rows = 0;
  TimePoint dispatched{};
  // The worker reads the request's client-region inputs, and writes its outputs when the request
  // named output_shm, in place (ipc/slot_codec.h); only ever for a batch of one request.
  bool in_place = false;
  bool outputs_in_place = false;  // in_place, and the worker writes the outputs into output_shm
};

// What every launch of every slot shares.
struct LaunchContext {
  std::string worker_binary;
  std::string control_endpoint;
  std::string segment_prefix;  // unique to this supervisor instance
  int heartbeat_ms = 1000;
  std::string log_level = "info";
  // Keeps every response ring alive while zmq messages point into it (zero-copy replies).
  PinnedRingKeeper* response_rings = nullptr;
  // Added to the environment of workers on a cuda:N device (MPS pipe directory, thread share).
  std::vector<std::string> gpu_env;
  // Makes the process (worker_launcher.h); null: fork+exec of worker_binary.
  WorkerLauncher* launcher = nullptr;
  // Each segment's bytes are reserved here first (limits.max_shm_bytes); null: no cap.
  ShmBudget* shm_budget = nullptr;
};

// Where a process's start-up went, for stats and the log (reset at each launch).
struct StartTimes {
  std::string via;            // "zygote" or "exec"
  TimePoint launched{};
  double launch_to_hello_ms = -1;
  double hello_to_ready_ms = -1;
  double load_ms = -1;        // the worker's own account: model load, then warm-up
  double warmup_ms = -1;
  double launch_to_ready_ms = -1;
};

// A worker's own account of its device (heartbeat "stage_us" and "device", ready "precision";
// worker/accelerator.h). Reset at each launch.
struct DeviceTelemetry {
  uint64_t batches = 0;  // batches of the current process the stage sums cover
  uint64_t h2d_us = 0;
  uint64_t compute_us = 0;
  uint64_t d2h_us = 0;
  std::string name;
  int streams = 1;
  bool pinned = false;
  bool mps_attached = false;
  int64_t memory_allocated = -1;  // -1: not reported (CPU)
  int64_t memory_reserved = -1;
  std::string precision;
  double warmup_ms = 0;
};

class WorkerSlot {
 public:
  WorkerSlot(int id, const ModelConfig& model, const InstanceConfig& instance, size_t model_index);

  // Starts a process (kStopped, kBackoff or kFailed -> kStarting). A failure (fork, segment,
  // descriptors) is external: the slot backs off per `policy` and the error is returned.
  Status Launch(const LaunchContext& context, TimePoint now, const RestartPolicy& policy);

  // The worker said hello / ready / heartbeat; any message counts as liveness.
  void OnMessage(TimePoint now) { last_heard_ = now; }
  void OnHello(TimePoint now);
  void OnReady(TimePoint now, double load_ms, double warmup_ms = -1);
  const StartTimes& start_times() const { return start_times_; }
  // The launch was refused before any process (the model file changed since its version was
  // loaded, ModelTable::CheckModelFile): kFailed with `why` as the failure reason, tried again
  // after policy.failed_retry.
  void RefuseLaunch(const std::string& why, TimePoint now, const RestartPolicy& policy);
  // The worker reported a fatal error (e.g. the model does not load) and is about to exit.
  // `kind` is "model", "device" or "internal".
  void OnFatalError(const std::string& reason, const std::string& kind, TimePoint now);
  // The supervisor is about to SIGKILL the process; `why` replaces the bare "killed by SIGKILL".
  void NoteKill(const std::string& why) { kill_reason_ = why; }
  // A SIGKILL went out: silence, hang and stop deadlines stop firing until the exit arrives.
  void OnKillSent(TimePoint now) {
    last_heard_ = now;
    fatal_at_ = now;
    stop_deadline_ = now + kStopGrace;
  }
  // Under MPS a fatal fault in one client poisons every client of the GPU: kills this worker so
  // the server can recover; its exit does not count as a GPU failure of this slot.
  void RecycleForMps(const std::string& why);
  // Whether the last exit was caused by an unusable device (before any MPS recycling).
  bool last_exit_was_device_failure() const { return last_exit_device_failure_; }
  // True when the oldest batch has run longer than `limit` (0: never).
  bool HangExpired(TimePoint now, Millis limit) const;
  // How many batches may be running at once (the ring's oldest; CUDA streams run several).
  int running_batches() const { return launched_streams_; }
  // The heartbeat interval this process was launched with (a reload changes the next launch's).
  Millis heartbeat() const { return launched_heartbeat_; }
  // True when the process should be presumed hung: silent for `heartbeat_limit` after its hello;
  // silent for kStartupGrace before it (exec and loading LibTorch can be slow on a busy host);
  // or still alive kStartupGrace after reporting a fatal error.
  bool LivenessExpired(TimePoint now, Clock::duration heartbeat_limit) const;
  static constexpr Millis kStartupGrace{30'000};

  // Ready, not winding down, under max_inflight_per_worker, and with a free response slot for
  // every batch in flight even while answered slots stay pinned by zero-copy replies.
  bool CanAccept() const;
  // True when the response being answered may be sent zero-copy: pinning it still leaves
  // max_inflight_per_worker response slots to the worker.
  bool CanPinResponse() const;
  // The response ring's consumer side (PinFrame for zero-copy replies); null without a process.
  PinnedResponseRing* responses() const { return responses_.get(); }
  // True when a reply pinned in the response ring has not been sent for `limit` (its client
  // stopped reading) and the pins cost the worker part of max_inflight_per_worker.
  bool ResponsesStuck(TimePoint now, Clock::duration limit) const;

  // Graceful removal (scale down, reload) or replacement (admin restart): no new batches
  // (kDraining); once the ring is empty the supervisor sends stop. A retired slot ends kStopped;
  // a restarted one relaunches at once without counting as a failure. A retired slot without a
  // process stops at once.
  void BeginRetire(const std::string& why);
  void BeginGracefulRestart(const std::string& why);
  // The farm is stopping: the stop message was sent (kStopping, deadline now + kStopGrace), or
  // the slot had no process (kStopped).
  void BeginShutdown(TimePoint now);
  // True when the process was asked to stop and has not exited within kStopGrace.
  bool StopExpired(TimePoint now) const {
    return state_ == SlotState::kStopping && pid_ > 0 && now >= stop_deadline_;
  }
  static constexpr Millis kStopGrace{5'000};
  static constexpr Millis kLaunchRetryFloor{100};
  // The earliest time this slot needs the loop's attention (a restart, a stop or liveness
  // deadline); TimePoint::max() when none.
  TimePoint NextDeadline(Clock::duration heartbeat_limit, Millis hang_limit) const;
  bool retiring() const { return retiring_; }
  bool restart_requested() const { return restart_requested_; }
  // True once, when the slot wants the stop message sent (ready, winding down, nothing in flight).
  bool TakeStopRequest(TimePoint now);
  // The worker's configuration for the next launch (reload).
  void UpdateConfig(const ModelConfig& model, const InstanceConfig& instance);
  const InstanceConfig& instance() const { return instance_; }

  // The worker's stdout+stderr pipe; ReadOutput calls emit(line) for each complete line and, at
  // end of file, for the unterminated rest.
  int output_fd() const { return output_.get(); }
  template <typename Emit>
  void ReadOutput(Emit&& emit);
  // Copies the batch's tensors into a free request slot (one copy per request) and rings the
  // worker. The caller checked CanAccept() and the byte budget. With `shm_in_place`, a batch of
  // one request that uses client regions names them instead (InflightBatch::in_place). Returns
  // false, leaving `batch` with the caller, when no request slot is free: never a write.
  bool Dispatch(InflightBatch& batch, bool shm_in_place = false);
  // Whether the batch Dispatch accepted last went in place.
  bool last_dispatch_in_place() const { return !inflight_.empty() && inflight_.back().in_place; }

  // Calls on_response(batch, response_slot) for each finished batch, oldest first; `clock` (the
  // loop's) dates each slot's release and starts the next batch's hang timer after each answer.
  // on_response returns std::optional<ipc::ProtocolViolation>: set, the response broke the slot
  // layout, the batch (untouched) goes back in flight and the worker is killed. Ring indices the
  // worker wrote out of bounds kill it too; nothing past them is read.
  template <typename OnResponse>
  void CollectResponses(const TimeSource& clock, OnResponse&& on_response);

  // The worker wrote something the shared-memory layout does not allow: logs `violation` once per
  // process, counts it, and SIGKILLs the process unless it was already reaped (MarkReaped). Its
  // batches stay in flight for OnExit.
  void OnProtocolViolation(const ipc::ProtocolViolation& violation, TimePoint now);
  // The process is known to have exited (waitpid reported it): no signal may go to its pid now.
  void MarkReaped() { reaped_ = true; }
  // Whether the last exit followed a protocol violation; violations over all processes.
  bool last_exit_was_protocol_violation() const { return last_exit_protocol_violation_; }
  uint64_t protocol_violations() const { return protocol_violations_; }

  // The process exited: release its resources, hand back the batches it held, and decide whether
  // and when to restart. Returns the batches for requeueing.
  std::vector<InflightBatch> OnExit(int wait_status, TimePoint now, const RestartPolicy& policy,
                                    bool shutting_down);
  // Launch later, in a coming loop turn (launch pacing, worker_pool.h): kStopped or kBackoff ->
  // kBackoff due at `now`; not a failure, the restart history is untouched.
  void DeferLaunch(TimePoint now, const std::string& why) {
    restart_at_ = now;
    TransitionTo(SlotState::kBackoff, why);
  }
  // kBackoff past restart_at, or kFailed past its cool-down.
  bool RestartDue(TimePoint now) const {
    return (state_ == SlotState::kBackoff || state_ == SlotState::kFailed) && now >= restart_at_;
  }
  // Whether a process of this slot is serving or may soon (not failed, not stopped).
  bool MayServeSoon() const {
    return state_ != SlotState::kFailed && state_ != SlotState::kStopped && !retiring_;
  }
  TimePoint restart_at() const { return restart_at_; }

  int id() const { return id_; }
  size_t model_index() const { return model_index_; }
  // The model table erased models before this slot's (ModelControl::ReclaimRemoved).
  void set_model_index(size_t index) { model_index_ = index; }
  const std::string& model_name() const { return model_name_; }
  const std::string& model_version() const { return model_version_; }
  const std::string& model_path() const { return model_path_; }  // what the next launch loads
  int generation() const { return generation_; }
  pid_t pid() const { return pid_; }
  SlotState state() const { return state_; }
  const std::string& device() const { return device_; }
  bool fallen_back() const { return fallen_back_; }
  const std::string& fallback_reason() const { return fallback_reason_; }
  TimePoint ready_since() const { return ready_since_; }
  const std::string& last_exit() const { return last_exit_; }
  const std::string& failure_reason() const { return failure_reason_; }
  void set_failure_reason(std::string reason) { failure_reason_ = std::move(reason); }
  int restarts() const { return restarts_; }
  size_t inflight() const { return inflight_.size(); }
  int64_t inflight_rows() const;
  TimePoint last_heard() const { return last_heard_; }
  int response_fd() const { return response_bell_.fd(); }
  uint64_t data_capacity() const { return slot_data_bytes_; }

  // Warm spare or serving (spare_policy.h): the role only; the model's lists decide who gets
  // batches. Promote records when a spare took a dead worker's place, so the first batch it is
  // sent afterwards measures the hand-over (`death`: when the supervisor reaped the dead worker).
  bool spare() const { return spare_; }
  void set_spare(bool spare) { spare_ = spare; }
  void Promote(std::optional<TimePoint> death);
  // Microseconds from the death of the worker it replaced to the first batch dispatched to it,
  // for the last promotion (-1: none yet, or no batch since).
  int64_t last_promotion_us() const { return last_promotion_us_; }
  int promotions() const { return promotions_; }

  DeviceTelemetry telemetry;
  // Counters: requests and batches answered through this slot, over all its processes.
  uint64_t requests_done = 0;
  uint64_t batches_done = 0;
  uint64_t rows_done = 0;

 private:
  // The worker's command line for this launch (generation_ already counted).
  ipc::WorkerLaunchArgs LaunchArgs(const LaunchContext& context) const;
  // The segment, both doorbells and the output pipe of a launch; the pipe's write end, for the
  // child, in `output_write_end`.
  Status CreateChannels(const LaunchContext& context, const std::string& segment_name,
                        UniqueFd* output_write_end);
  int id_;
  size_t model_index_;
  std::string model_name_;
  std::string model_version_;
  std::string model_path_;
  std::string model_format_;    // ModelConfig::format
  std::string model_optimize_;  // ModelConfig::optimize
  InstanceConfig instance_;
  std::string pipeline_json_;  // the model's stages as the worker's --pipeline takes them
  std::string warmup_json_;  // the model's warm-up batches as the worker's --warmup takes them
  std::string probe_json_;   // --probe: OutputProbeBatches (common/config.h); empty: none
  int ring_slots_;
  uint64_t slot_data_bytes_;
  int max_inflight_;

  void TransitionTo(SlotState next, const std::string& why);
  void ReleaseProcess();
  // Checks the worker's request_tail against [the tail seen before, request_head_]; a violation
  // calls OnProtocolViolation. False when the ring must not be used.
  bool CheckRequestTail(TimePoint now);
  // A request slot is free by the indices last checked (no read of the segment).
  bool RequestSlotFree() const;

  SlotState state_ = SlotState::kStopped;
  int generation_ = -1;
  pid_t pid_ = -1;
  std::shared_ptr<ipc::WorkerSegment> segment_;
  ShmBudget::Reservation segment_budget_;  // segment_'s share of limits.max_shm_bytes
  std::shared_ptr<PinnedResponseRing> responses_;  // shares segment_; also held by the keeper
  ipc::Doorbell request_bell_;
  ipc::Doorbell response_bell_;
  UniqueFd output_;
  std::string output_partial_;
  std::deque<InflightBatch> inflight_;
  // The request ring's head, kept here and only stored into the segment; the worker's tail as last
  // checked. Both start at 0 with each segment.
  uint64_t request_head_ = 0;
  uint64_t request_tail_seen_ = 0;
  bool violation_reported_ = false;  // this process broke the protocol and was killed
  bool last_exit_protocol_violation_ = false;
  bool reaped_ = false;  // the current process was reaped; its pid may belong to another now
  uint64_t protocol_violations_ = 0;
  TimePoint front_started_{};  // when the oldest in-flight batch started running

  TimePoint last_heard_{};
  bool hello_received_ = false;
  bool fatal_reported_ = false;
  bool device_failure_reported_ = false;
  bool last_exit_device_failure_ = false;
  bool mps_ = false;           // this process was launched as an MPS client
  bool mps_recycled_ = false;  // killed because another MPS client of its GPU failed
  TimePoint fatal_at_{};
  std::string kill_reason_;
  std::string fatal_kind_;  // "model", "device" or "internal", with fatal_reported_
  int launched_streams_ = 1;
  Millis launched_heartbeat_{1000};
  std::string device_;  // instance_.device, or "cpu" after a fallback
  bool fallen_back_ = false;
  std::string fallback_reason_;
  bool retiring_ = false;
  bool restart_requested_ = false;
  bool stop_sent_ = false;
  TimePoint ready_since_{};
  bool reached_ready_ = false;  // this process reported ready
  TimePoint restart_at_{};
  TimePoint stop_deadline_{};
  RestartHistory history_;
  std::minstd_rand jitter_;
  int restarts_ = 0;
  StartTimes start_times_;
  uint64_t batches_at_launch_ = 0;  // batches_done when the current process was launched
  bool spare_ = false;
  int promotions_ = 0;
  bool awaiting_promoted_batch_ = false;
  TimePoint promoted_for_death_{};
  int64_t last_promotion_us_ = -1;
  std::string last_exit_;
  std::string failure_reason_;
  // EncodeBatch's description of each batch, reused for its memory. Between batches its parts
  // point at frames since freed: never read until the next EncodeBatch writes it over.
  ipc::RequestBatch encode_scratch_;
};

template <typename OnResponse>
void WorkerSlot::CollectResponses(const TimeSource& clock, OnResponse&& on_response) {
  if (!responses_ || violation_reported_) return;
  response_bell_.Drain();
  responses_->ReleaseFreed();
  if (!CheckRequestTail(clock.Now())) return;
  // Next checks the worker's head against the batches in flight: a response for nothing, or a
  // head far past the tail, stops here instead of being read (or looped over).
  while (const uint8_t* slot = responses_->Next(inflight_.size())) {
    InflightBatch batch = std::move(inflight_.front());
    inflight_.pop_front();
    front_started_ = clock.Now();  // the next batch in the ring starts now
    std::optional<ipc::ProtocolViolation> violation;
    try {
      violation = on_response(batch, slot);
    } catch (...) {
      // The slot goes back to the worker either way, so the next response pairs with the next
      // batch; the loop's barrier logs what failed.
      responses_->Finish(front_started_);
      throw;
    }
    if (violation) {
      inflight_.push_front(std::move(batch));  // for OnExit to requeue
      OnProtocolViolation(*violation, front_started_);
      return;
    }
    responses_->Finish(front_started_);
  }
  if (responses_->violation()) OnProtocolViolation(*responses_->violation(), clock.Now());
}

template <typename Emit>
void WorkerSlot::ReadOutput(Emit&& emit) {
  if (!output_.valid()) return;
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(output_.get(), buffer, sizeof(buffer));
    if (n > 0) {
      output_partial_.append(buffer, static_cast<size_t>(n));
      size_t newline;
      while ((newline = output_partial_.find('\n')) != std::string::npos) {
        emit(output_partial_.substr(0, newline));
        output_partial_.erase(0, newline + 1);
      }
      continue;
    }
    if (n == 0) {  // every writer closed: the process is gone
      if (!output_partial_.empty()) emit(output_partial_);
      output_partial_.clear();
      output_.Reset();
    }
    return;  // EAGAIN: nothing more for now
  }
}

}  // namespace torchfarm
