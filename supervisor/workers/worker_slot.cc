#include "supervisor/workers/worker_slot.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "common/log.h"
#include "ipc/control_protocol.h"
#include "supervisor/workers/batch_encoder.h"
#include "supervisor/workers/process_launcher.h"

namespace torchfarm {

namespace {

// CUDA's MPS errors by name (cudaErrorMps*, as worker/accelerator_cuda.cc reports them) or text.
bool IsMpsServerFault(const std::string& reason) {
  return reason.find("cudaErrorMps") != std::string::npos ||
         reason.find("MPS server") != std::string::npos ||
         reason.find("MPS client") != std::string::npos;
}

constexpr int kRequestDoorbellFd = 3;
constexpr int kResponseDoorbellFd = 4;

std::string ProbeJson(const ModelConfig& model) {
  const auto batches = OutputProbeBatches(model);
  return batches.empty() ? std::string() : WarmupToJson(batches);
}
}  // namespace

const char* SlotStateName(SlotState state) {
  switch (state) {
    case SlotState::kStarting: return "starting";
    case SlotState::kReady: return "ready";
    case SlotState::kDraining: return "draining";
    case SlotState::kStopping: return "stopping";
    case SlotState::kBackoff: return "restarting";
    case SlotState::kFailed: return "failed";
    case SlotState::kStopped: return "stopped";
  }
  return "unknown";
}

bool SlotTransitionAllowed(SlotState from, SlotState to) {
  using S = SlotState;
  if (from == to) return true;
  switch (from) {
    case S::kStopped: return to == S::kStarting || to == S::kBackoff;  // a failed launch
    case S::kStarting:
    case S::kReady:
    case S::kDraining:
      return to != S::kStarting && !(from == S::kDraining && to == S::kReady);
    case S::kStopping: return to == S::kStopped || to == S::kBackoff || to == S::kFailed;
    case S::kBackoff:
    case S::kFailed:
      return to == S::kStarting || to == S::kBackoff || to == S::kFailed || to == S::kStopped;
  }
  return false;
}

WorkerSlot::WorkerSlot(int id, const ModelConfig& model, const InstanceConfig& instance,
                       size_t model_index)
    : id_(id),
      model_index_(model_index),
      model_name_(model.name),
      model_version_(model.version),
      model_path_(model.path),
      model_format_(model.format),
      model_optimize_(model.optimize),
      instance_(instance),
      pipeline_json_(PipelineToJson(model.pipeline)),
      warmup_json_(model.warmup.empty() ? std::string() : WarmupToJson(model.warmup)),
      probe_json_(ProbeJson(model)),
      ring_slots_(model.ring_slots),
      slot_data_bytes_(model.slot_bytes),
      max_inflight_(model.max_inflight_per_worker),
      device_(instance.device),
      jitter_(static_cast<unsigned>(::getpid()) * 7919u + static_cast<unsigned>(id)) {}

void WorkerSlot::TransitionTo(SlotState next, const std::string& why) {
  if (!SlotTransitionAllowed(state_, next)) {
    // A supervisor bug, never a user's doing: say so loudly and keep the old state.
    TF_LOG(kError) << "refused worker state change" << Kv("worker", id_) << Kv("pid", pid_)
                   << Kv("from", SlotStateName(state_)) << Kv("to", SlotStateName(next))
                   << Kv("why", why);
    return;
  }
  if (next == state_) return;
  TF_LOG(kInfo) << "worker state" << Kv("worker", id_) << Kv("model", model_name_)
                << Kv("version", model_version_) << Kv("pid", pid_)
                << Kv("from", SlotStateName(state_)) << Kv("to", SlotStateName(next))
                << Kv("why", why);
  state_ = next;
}

ipc::WorkerLaunchArgs WorkerSlot::LaunchArgs(const LaunchContext& context) const {
  ipc::WorkerLaunchArgs args;
  args.worker_id = id_;
  args.generation = generation_;
  args.model_name = model_name_;
  args.model_path = model_path_;
  args.model_format = model_format_;
  args.model_optimize = model_optimize_;
  args.device = device_;
  args.threads = instance_.threads;
  args.cores = instance_.cores;
  args.segment = context.segment_prefix + "w" + std::to_string(id_) + "." +
                 std::to_string(generation_);
  args.request_doorbell_fd = kRequestDoorbellFd;
  args.response_doorbell_fd = kResponseDoorbellFd;
  args.control_endpoint = context.control_endpoint;
  args.heartbeat_ms = context.heartbeat_ms;
  args.log_level = context.log_level;
  args.warmup = warmup_json_;
  args.probe = probe_json_;
  args.pipeline = pipeline_json_;
  args.idle_spin_us = instance_.idle_spin_us;
  if (device_.rfind("cuda", 0) == 0) {
    args.precision = instance_.precision;
    args.streams = instance_.streams;
    args.cudnn_benchmark = instance_.cudnn_benchmark;
    args.pin_memory = instance_.pin_memory;
  } else if (!fallen_back_) {
    args.precision = instance_.precision;  // bf16 on the CPU is the user's choice
  }  // after a fallback the CPU runs fp32: fp16 kernels are missing or slow there
  return args;
}

Status WorkerSlot::CreateChannels(const LaunchContext& context, const std::string& segment_name,
                                  UniqueFd* output_write_end) {
  std::unique_ptr<ipc::WorkerSegment> segment;
  const auto ring_slots = static_cast<uint32_t>(ring_slots_);
  Status s = ShmBudget::Reserve(context.shm_budget,
                                ipc::WorkerSegment::TotalBytes(ring_slots, slot_data_bytes_),
                                "worker " + std::to_string(id_) + " segment", &segment_budget_);
  if (s.ok()) s = ipc::WorkerSegment::Create(segment_name, ring_slots, slot_data_bytes_, &segment);
  if (s.ok()) {
    segment_ = std::move(segment);
    responses_ = std::make_shared<PinnedResponseRing>(segment_);
    if (context.response_rings) context.response_rings->Add(responses_);
  }
  if (s.ok()) s = ipc::Doorbell::Create(&request_bell_);
  if (s.ok()) s = ipc::Doorbell::Create(&response_bell_);
  int pipe_fds[2] = {-1, -1};
  if (s.ok() && ::pipe2(pipe_fds, O_CLOEXEC) != 0) s = Internal("cannot create the output pipe");
  *output_write_end = UniqueFd(pipe_fds[1]);
  output_ = UniqueFd(pipe_fds[0]);
  if (s.ok()) ::fcntl(output_.get(), F_SETFL, O_NONBLOCK);
  return s;
}

Status WorkerSlot::Launch(const LaunchContext& context, TimePoint now,
                          const RestartPolicy& policy) {
  ++generation_;
  const bool on_gpu = device_.rfind("cuda", 0) == 0;
  telemetry = DeviceTelemetry{};
  launched_streams_ = on_gpu ? std::max(1, instance_.streams) : 1;
  launched_heartbeat_ = Millis(context.heartbeat_ms);
  mps_ = on_gpu && !context.gpu_env.empty();
  mps_recycled_ = false;

  WorkerProcessSpec spec;
  spec.args = LaunchArgs(context);
  UniqueFd write_end;
  Status s = CreateChannels(context, spec.args.segment, &write_end);
  if (s.ok()) {
    spec.argv = spec.args.ToArgv(context.worker_binary);
    spec.fds = {{request_bell_.fd(), kRequestDoorbellFd},
                {response_bell_.fd(), kResponseDoorbellFd},
                {write_end.get(), STDOUT_FILENO},
                {write_end.get(), STDERR_FILENO}};
    if (on_gpu) spec.env = context.gpu_env;
    start_times_ = StartTimes{};
    start_times_.launched = now;
    batches_at_launch_ = batches_done;
    static ProcessWorkerLauncher exec_only;
    WorkerLauncher& launcher = context.launcher ? *context.launcher : exec_only;
    LaunchedProcess launched;
    s = launcher.Start(spec, now, &launched);
    pid_ = launched.pid;
    start_times_.via = launched.via;
  }
  if (!s.ok()) {
    if (segment_) ipc::WorkerSegment::Remove(segment_->name());
    segment_.reset();
    segment_budget_.Release();
    responses_.reset();
    output_.Reset();
    pid_ = -1;
    // fork EAGAIN, descriptors or /dev/shm exhausted: the machine's state, not the model's. Back
    // off and try again like after a kill; never failed for good.
    failure_reason_ = "launch failed: " + s.message();
    ExitFacts facts;
    RestartDecision decision = DecideRestart(policy, facts, now, &history_, &jitter_);
    // Even with initial_backoff_ms 0, a machine out of processes is not asked again at once.
    restart_at_ = std::max(decision.at, now + kLaunchRetryFloor);
    TransitionTo(SlotState::kBackoff, failure_reason_ + "; " + decision.why);
    return s;
  }
  output_partial_.clear();
  request_head_ = 0;
  request_tail_seen_ = 0;
  violation_reported_ = false;
  reaped_ = false;
  reached_ready_ = false;
  stop_sent_ = false;
  restart_requested_ = false;
  last_heard_ = now;
  hello_received_ = false;
  fatal_reported_ = false;
  device_failure_reported_ = false;
  kill_reason_.clear();
  TransitionTo(SlotState::kStarting, "launched generation " + std::to_string(generation_));
  return Status::Ok();
}

void WorkerSlot::RefuseLaunch(const std::string& why, TimePoint now, const RestartPolicy& policy) {
  failure_reason_ = why;
  restart_at_ = now + policy.failed_retry;
  if (state_ == SlotState::kStopped) TransitionTo(SlotState::kBackoff, why);  // the table's way
  TransitionTo(SlotState::kFailed, why);
}

void WorkerSlot::OnHello(TimePoint now) {
  hello_received_ = true;
  last_heard_ = now;
  if (start_times_.launch_to_hello_ms < 0) {
    start_times_.launch_to_hello_ms = ToMicros(now - start_times_.launched) / 1e3;
  }
}

void WorkerSlot::OnReady(TimePoint now, double load_ms, double warmup_ms) {
  last_heard_ = now;
  if (reached_ready_) return;  // said twice: the first one counts
  ready_since_ = now;
  reached_ready_ = true;
  StartTimes& t = start_times_;
  t.launch_to_ready_ms = ToMicros(now - t.launched) / 1e3;
  if (t.launch_to_hello_ms >= 0) t.hello_to_ready_ms = t.launch_to_ready_ms - t.launch_to_hello_ms;
  t.load_ms = load_ms;
  t.warmup_ms = warmup_ms;
  std::ostringstream why;
  why << "model loaded in " << load_ms << " ms; started by " << t.via << ", launch->hello "
      << t.launch_to_hello_ms << " ms, hello->ready " << t.hello_to_ready_ms << " ms";
  // A slot asked to wind down while it started stays draining.
  if (state_ == SlotState::kStarting) TransitionTo(SlotState::kReady, why.str());
}

void WorkerSlot::BeginRetire(const std::string& why) {
  retiring_ = true;
  if (pid_ <= 0) {
    TransitionTo(SlotState::kStopped, why);
  } else if (state_ == SlotState::kStarting || state_ == SlotState::kReady) {
    TransitionTo(SlotState::kDraining, why);
  }
}

void WorkerSlot::BeginGracefulRestart(const std::string& why) {
  if (pid_ <= 0) return;
  restart_requested_ = true;
  if (state_ == SlotState::kStarting || state_ == SlotState::kReady) {
    TransitionTo(SlotState::kDraining, why);
  }
}

void WorkerSlot::BeginShutdown(TimePoint now) {
  if (pid_ <= 0) {
    TransitionTo(SlotState::kStopped, "farm stopping");
    return;
  }
  stop_sent_ = true;
  stop_deadline_ = now + kStopGrace;
  TransitionTo(SlotState::kStopping, "farm stopping");
}

TimePoint WorkerSlot::NextDeadline(Clock::duration heartbeat_limit, Millis hang_limit) const {
  switch (state_) {
    case SlotState::kBackoff:
    case SlotState::kFailed:
      return restart_at_;
    case SlotState::kStopping:
      return pid_ > 0 ? stop_deadline_ : TimePoint::max();
    case SlotState::kStarting:
    case SlotState::kReady:
    case SlotState::kDraining: {
      if (pid_ <= 0) return TimePoint::max();
      TimePoint next =
          fatal_reported_ ? fatal_at_ + kStartupGrace
                          : last_heard_ + (hello_received_ ? heartbeat_limit
                                                           : Clock::duration(kStartupGrace));
      if (hang_limit.count() > 0 && !inflight_.empty() && kill_reason_.empty()) {
        next = std::min(next, front_started_ + hang_limit);
      }
      // One tick past the limit: the checks compare with '>'.
      return next + Micros(1);
    }
    case SlotState::kStopped:
      return TimePoint::max();
  }
  return TimePoint::max();
}

void WorkerSlot::RecycleForMps(const std::string& why) {
  if (pid_ <= 0 || !kill_reason_.empty()) return;
  NoteKill(why);
  mps_recycled_ = true;
  ::kill(pid_, SIGKILL);
}

void WorkerSlot::OnFatalError(const std::string& reason, const std::string& kind, TimePoint now) {
  failure_reason_ = reason;
  fatal_reported_ = true;
  fatal_kind_ = kind;
  device_failure_reported_ = kind == "device";
  fatal_at_ = now;
}

bool WorkerSlot::HangExpired(TimePoint now, Millis limit) const {
  if (limit.count() <= 0 || inflight_.empty() || pid_ <= 0 || !kill_reason_.empty()) return false;
  return now - front_started_ > limit;
}

bool WorkerSlot::LivenessExpired(TimePoint now, Clock::duration heartbeat_limit) const {
  if (pid_ <= 0 || (state_ != SlotState::kStarting && state_ != SlotState::kReady &&
                    state_ != SlotState::kDraining)) {
    return false;
  }
  if (fatal_reported_) return now - fatal_at_ > kStartupGrace;
  if (!hello_received_) return now - last_heard_ > kStartupGrace;
  return now - last_heard_ > heartbeat_limit;
}

bool WorkerSlot::CanAccept() const {
  // Every batch in flight gets a response slot: the worker then never waits for the ring, however
  // long clients take to receive the replies that pin answered slots.
  // The request ring is counted too: a worker may publish a response before it pops the request
  // slot, so answered batches can still hold request slots.
  return state_ == SlotState::kReady && !retiring_ && !restart_requested_ && !violation_reported_ &&
         inflight_.size() < static_cast<size_t>(max_inflight_) && responses_ &&
         inflight_.size() + responses_->unpopped() < responses_->slot_count() && RequestSlotFree();
}

bool WorkerSlot::RequestSlotFree() const {
  if (!segment_) return false;
  // The worker's tail as it is now when it is within bounds (Dispatch checks it for good), else
  // the one last checked.
  const uint64_t tail = segment_->request_ring().LoadTail();
  const uint64_t popped =
      tail >= request_tail_seen_ && tail <= request_head_ ? tail : request_tail_seen_;
  return request_head_ - popped < segment_->request_ring().slot_count();
}

bool WorkerSlot::CheckRequestTail(TimePoint now) {
  if (violation_reported_) return false;
  if (!segment_) return true;
  const uint64_t tail = segment_->request_ring().LoadTail();
  std::optional<ipc::ProtocolViolation> violation =
      ipc::CheckIndex("request_tail", tail, request_tail_seen_, request_head_, [&] {
        return "at least the tail seen before, at most the supervisor's head " +
               std::to_string(request_head_);
      });
  if (violation) {
    OnProtocolViolation(*violation, now);
    return false;
  }
  request_tail_seen_ = tail;
  return true;
}

void WorkerSlot::OnProtocolViolation(const ipc::ProtocolViolation& violation, TimePoint now) {
  if (violation_reported_) return;
  violation_reported_ = true;
  ++protocol_violations_;
  TF_LOG(kError) << "worker broke the shared-memory protocol; killing it" << Kv("worker", id_)
                 << Kv("pid", pid_) << Kv("model", model_name_) << Kv("version", model_version_)
                 << Kv("field", violation.field) << Kv("value", violation.value)
                 << Kv("bound", violation.bound);
  NoteKill("protocol violation: " + violation.field + " " + violation.value + " outside " +
           violation.bound);
  if (pid_ > 0 && !reaped_) ::kill(pid_, SIGKILL);
  OnKillSent(now);
}

bool WorkerSlot::CanPinResponse() const {
  // Counts the response being answered (not popped yet) as pinned.
  return responses_ &&
         responses_->unpopped() + 1 + static_cast<uint32_t>(max_inflight_) <= responses_->slot_count();
}

bool WorkerSlot::ResponsesStuck(TimePoint now, Clock::duration limit) const {
  return responses_ && pid_ > 0 &&
         responses_->unpopped() + static_cast<uint32_t>(max_inflight_) > responses_->slot_count() &&
         responses_->Stuck(now, limit);
}

bool WorkerSlot::TakeStopRequest(TimePoint now) {
  if (stop_sent_ || state_ != SlotState::kDraining || pid_ <= 0 || !inflight_.empty()) return false;
  // ROUTER drops messages to a peer that has not connected yet: wait for its hello.
  if (!hello_received_) return false;
  stop_sent_ = true;
  stop_deadline_ = now + kStopGrace;
  TransitionTo(SlotState::kStopping, retiring_ ? "retiring" : "graceful restart");
  return true;
}

void WorkerSlot::UpdateConfig(const ModelConfig& model, const InstanceConfig& instance) {
  model_path_ = model.path;
  model_format_ = model.format;
  model_optimize_ = model.optimize;
  ring_slots_ = model.ring_slots;
  slot_data_bytes_ = model.slot_bytes;
  max_inflight_ = model.max_inflight_per_worker;
  warmup_json_ = model.warmup.empty() ? std::string() : WarmupToJson(model.warmup);
  probe_json_ = ProbeJson(model);
  pipeline_json_ = PipelineToJson(model.pipeline);
  if (!fallen_back_) device_ = instance.device;
  instance_ = instance;
}

int64_t WorkerSlot::inflight_rows() const {
  int64_t rows = 0;
  for (const auto& b : inflight_) rows += b.rows;
  return rows;
}

bool WorkerSlot::Dispatch(InflightBatch& batch, bool shm_in_place) {
  if (!segment_ || !CheckRequestTail(batch.dispatched)) return false;
  ipc::SpscRing ring = segment_->request_ring();
  // CanAccept() said yes; the ring disagrees: a failed dispatch.
  if (request_head_ - request_tail_seen_ >= ring.slot_count()) return false;
  uint8_t* slot = ring.SlotAt(request_head_);
  const BatchEncoding encoding =
      EncodeBatch(batch, shm_in_place, slot, ring.data_capacity(), &encode_scratch_);
  batch.in_place = encoding.in_place;
  batch.outputs_in_place = encoding.outputs_in_place;
  ring.StoreHead(++request_head_);
  request_bell_.Ring();
  if (awaiting_promoted_batch_) {
    awaiting_promoted_batch_ = false;
    last_promotion_us_ = ToMicros(batch.dispatched - promoted_for_death_);
  }
  if (inflight_.empty()) front_started_ = batch.dispatched;
  inflight_.push_back(std::move(batch));
  return true;
}

void WorkerSlot::Promote(std::optional<TimePoint> death) {
  spare_ = false;
  ++promotions_;
  awaiting_promoted_batch_ = death.has_value();
  if (death) promoted_for_death_ = *death;
  last_promotion_us_ = -1;
}

void WorkerSlot::ReleaseProcess() {
  // The name goes now; the mapping stays while zero-copy replies still point into it (the
  // PinnedRingKeeper holds it), and the last reference unmaps it.
  if (segment_) ipc::WorkerSegment::Remove(segment_->name());
  segment_.reset();
  segment_budget_.Release();
  responses_.reset();
  request_bell_ = ipc::Doorbell();
  response_bell_ = ipc::Doorbell();
  pid_ = -1;
}

std::vector<InflightBatch> WorkerSlot::OnExit(int wait_status, TimePoint now,
                                              const RestartPolicy& policy, bool shutting_down) {
  last_exit_ = DescribeWaitStatus(wait_status);
  if (!kill_reason_.empty()) last_exit_ = kill_reason_ + " (" + last_exit_ + ")";
  pid_t old_pid = pid_;
  std::vector<InflightBatch> orphans(std::make_move_iterator(inflight_.begin()),
                                     std::make_move_iterator(inflight_.end()));
  inflight_.clear();
  ReleaseProcess();
  last_exit_protocol_violation_ = violation_reported_;
  violation_reported_ = false;

  const bool clean = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == ipc::kExitOk;
  if (shutting_down || retiring_ ||
      (state_ == SlotState::kStopping && clean && !restart_requested_)) {
    TransitionTo(SlotState::kStopped, last_exit_);
    return orphans;
  }
  if (restart_requested_ && clean) {
    restart_requested_ = false;
    restart_at_ = now;  // a requested replacement: no backoff, not a failure
    TransitionTo(SlotState::kBackoff, "graceful restart");
    return orphans;
  }
  restart_requested_ = false;
  // A reason the worker reported itself (why the model did not load) beats the exit status.
  if (!fatal_reported_) {
    failure_reason_ = "worker pid " + std::to_string(old_pid) + " " + last_exit_;
  }
  const bool device_failure =
      device_failure_reported_ ||
      (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == ipc::kExitDeviceFailure);
  last_exit_device_failure_ = device_failure && !mps_recycled_;
  // An MPS server recovering from another client's fault refuses clients for a while (807): that
  // is the server's state, not this GPU failing, so it does not count towards the fallback.
  const bool mps_fault = mps_ && (mps_recycled_ || IsMpsServerFault(failure_reason_));
  ExitFacts facts;
  // The model not loading is a start failure; an internal error after ready is a crash.
  facts.kind = ClassifyExit(wait_status, reached_ready_, device_failure && !mps_fault,
                            fatal_reported_ && (fatal_kind_ == "model" || !reached_ready_) &&
                                !device_failure_reported_);
  facts.reached_ready = reached_ready_;
  facts.ready_for = reached_ready_ ? now - ready_since_ : Clock::duration(0);
  facts.batches_answered = batches_done - batches_at_launch_;
  facts.killed_from_outside = kill_reason_.empty() && !mps_recycled_ && WIFSIGNALED(wait_status) &&
                              (WTERMSIG(wait_status) == SIGKILL || WTERMSIG(wait_status) == SIGTERM);
  facts.on_gpu = device_ != "cpu";
  facts.may_fall_back = instance_.fallback == "cpu";
  facts.gpu_failures_before_fallback = instance_.gpu_failures_before_fallback;
  RestartDecision decision = DecideRestart(policy, facts, now, &history_, &jitter_);
  restart_at_ = decision.at;
  switch (decision.action) {
    case RestartDecision::Action::kFallBackToCpu:
      fallback_reason_ = failure_reason_;
      TF_LOG(kWarn) << "GPU keeps failing; falling back to CPU" << Kv("worker", id_)
                    << Kv("model", model_name_) << Kv("device", device_)
                    << Kv("gpu_failures", instance_.gpu_failures_before_fallback)
                    << Kv("reason", fallback_reason_);
      device_ = "cpu";
      fallen_back_ = true;
      ++restarts_;
      TransitionTo(SlotState::kBackoff, last_exit_ + "; " + decision.why);
      break;
    case RestartDecision::Action::kRelaunch:
      ++restarts_;
      TransitionTo(SlotState::kBackoff, last_exit_ + " (" + decision.why + ")");
      break;
    case RestartDecision::Action::kFail:
      TransitionTo(SlotState::kFailed, last_exit_ + "; " + decision.why);
      break;
  }
  return orphans;
}

}  // namespace torchfarm
