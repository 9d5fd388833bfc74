#include "supervisor/worker_slot.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "common/log.h"
#include "ipc/control_protocol.h"
#include "supervisor/batch_encoder.h"
#include "supervisor/process_launcher.h"

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
}  // namespace

RestartPolicy RestartPolicy::From(const RestartConfig& config) {
  RestartPolicy p;
  p.initial_backoff = Millis(config.initial_backoff_ms);
  p.max_backoff = Millis(config.max_backoff_ms);
  p.max_restarts = config.max_restarts;
  p.window = Millis(config.window_ms);
  p.healthy_after = Millis(config.healthy_after_ms);
  return p;
}

const char* SlotStateName(SlotState state) {
  switch (state) {
    case SlotState::kStarting: return "starting";
    case SlotState::kReady: return "ready";
    case SlotState::kStopping: return "stopping";
    case SlotState::kBackoff: return "restarting";
    case SlotState::kFailed: return "failed";
    case SlotState::kStopped: return "stopped";
  }
  return "unknown";
}

WorkerSlot::WorkerSlot(int id, const ModelConfig& model, const InstanceConfig& instance,
                       size_t model_index)
    : id_(id), model_index_(model_index), model_name_(model.name), model_path_(model.path),
      instance_(instance),
      warmup_json_(model.warmup.empty() ? std::string() : WarmupToJson(model.warmup)),
      ring_slots_(model.ring_slots), slot_data_bytes_(model.slot_bytes),
      max_inflight_(model.max_inflight_per_worker), device_(instance.device) {}

void WorkerSlot::TransitionTo(SlotState next, const std::string& why) {
  if (next == state_) return;
  TF_LOG(kInfo) << "worker state" << Kv("worker", id_) << Kv("model", model_name_)
                << Kv("pid", pid_) << Kv("from", SlotStateName(state_))
                << Kv("to", SlotStateName(next)) << Kv("why", why);
  state_ = next;
}

Status WorkerSlot::Launch(const LaunchContext& context, TimePoint now) {
  ++generation_;
  ipc::WorkerLaunchArgs args;
  args.worker_id = id_;
  args.generation = generation_;
  args.model_name = model_name_;
  args.model_path = model_path_;
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
  args.idle_spin_us = instance_.idle_spin_us;
  const bool on_gpu = device_.rfind("cuda", 0) == 0;
  if (on_gpu) {
    args.precision = instance_.precision;
    args.streams = instance_.streams;
    args.cudnn_benchmark = instance_.cudnn_benchmark;
    args.pin_memory = instance_.pin_memory;
  } else if (!fallen_back_) {
    args.precision = instance_.precision;  // bf16 on the CPU is the user's choice
  }  // after a fallback the CPU runs fp32: fp16 kernels are missing or slow there
  telemetry = DeviceTelemetry{};
  mps_ = on_gpu && !context.gpu_env.empty();
  mps_recycled_ = false;

  std::unique_ptr<ipc::WorkerSegment> segment;
  Status s = ipc::WorkerSegment::Create(args.segment, static_cast<uint32_t>(ring_slots_),
                                        slot_data_bytes_, &segment);
  if (s.ok()) {
    segment_ = std::move(segment);
    responses_ = std::make_shared<PinnedResponseRing>(segment_);
    if (context.response_rings) context.response_rings->Add(responses_);
  }
  if (s.ok()) s = ipc::Doorbell::Create(&request_bell_);
  if (s.ok()) s = ipc::Doorbell::Create(&response_bell_);
  int pipe_fds[2] = {-1, -1};
  if (s.ok() && ::pipe2(pipe_fds, O_CLOEXEC) != 0) s = Internal("cannot create the output pipe");
  UniqueFd write_end(pipe_fds[1]);
  output_ = UniqueFd(pipe_fds[0]);
  if (s.ok()) {
    ::fcntl(output_.get(), F_SETFL, O_NONBLOCK);
    s = LaunchProcess(args.ToArgv(context.worker_binary),
                      {{request_bell_.fd(), kRequestDoorbellFd},
                       {response_bell_.fd(), kResponseDoorbellFd},
                       {write_end.get(), STDOUT_FILENO},
                       {write_end.get(), STDERR_FILENO}},
                      &pid_, on_gpu ? context.gpu_env : std::vector<std::string>{});
  }
  if (!s.ok()) {
    segment_.reset();
    responses_.reset();
    output_.Reset();
    return s;
  }
  output_partial_.clear();
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

void WorkerSlot::OnReady(TimePoint now, double load_ms) {
  last_heard_ = now;
  ready_since_ = now;
  std::ostringstream why;
  why << "model loaded in " << load_ms << " ms";
  TransitionTo(SlotState::kReady, why.str());
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
  device_failure_reported_ = kind == "device";
  fatal_at_ = now;
}

bool WorkerSlot::HangExpired(TimePoint now, Millis limit) const {
  if (limit.count() <= 0 || inflight_.empty() || pid_ <= 0 || !kill_reason_.empty()) return false;
  return now - front_started_ > limit;
}

bool WorkerSlot::LivenessExpired(TimePoint now, Clock::duration heartbeat_limit) const {
  if (pid_ <= 0 || (state_ != SlotState::kStarting && state_ != SlotState::kReady)) return false;
  if (fatal_reported_) return now - fatal_at_ > kStartupGrace;
  if (!hello_received_) return now - last_heard_ > kStartupGrace;
  return now - last_heard_ > heartbeat_limit;
}

bool WorkerSlot::CanAccept() const {
  // Every batch in flight gets a response slot: the worker then never waits for the ring, however
  // long clients take to receive the replies that pin answered slots.
  return state_ == SlotState::kReady && !retiring_ && !restart_requested_ &&
         inflight_.size() < static_cast<size_t>(max_inflight_) && responses_ &&
         inflight_.size() + responses_->unpopped() < responses_->slot_count();
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

bool WorkerSlot::TakeStopRequest() {
  if (stop_sent_ || !(retiring_ || restart_requested_) || pid_ <= 0 || !inflight_.empty()) return false;
  // ROUTER drops messages to a peer that has not connected yet: wait for its hello.
  if (!hello_received_) return false;
  if (state_ != SlotState::kReady && state_ != SlotState::kStarting) return false;
  stop_sent_ = true;
  TransitionTo(SlotState::kStopping, retiring_ ? "retiring" : "graceful restart");
  return true;
}

void WorkerSlot::UpdateConfig(const ModelConfig& model, const InstanceConfig& instance) {
  model_path_ = model.path;
  ring_slots_ = model.ring_slots;
  slot_data_bytes_ = model.slot_bytes;
  max_inflight_ = model.max_inflight_per_worker;
  if (!fallen_back_) device_ = instance.device;
  instance_ = instance;
}

int64_t WorkerSlot::inflight_rows() const {
  int64_t rows = 0;
  for (const auto& b : inflight_) rows += b.rows;
  return rows;
}

bool WorkerSlot::Dispatch(InflightBatch batch, bool shm_in_place) {
  ipc::SpscRing ring = segment_->request_ring();
  uint8_t* slot = ring.TryReserve();
  // CanAccept() bounds in-flight batches by max_inflight_per_worker <= ring_slots.
  const BatchEncoding encoding = EncodeBatch(batch, shm_in_place, slot, ring.data_capacity());
  batch.in_place = encoding.in_place;
  batch.outputs_in_place = encoding.outputs_in_place;
  ring.Publish();
  request_bell_.Ring();
  if (inflight_.empty()) front_started_ = batch.dispatched;
  const bool in_place = batch.in_place;
  inflight_.push_back(std::move(batch));
  return in_place;
}

std::vector<InflightBatch> WorkerSlot::OnExit(int wait_status, TimePoint now,
                                              const RestartPolicy& policy, bool shutting_down) {
  last_exit_ = DescribeWaitStatus(wait_status);
  if (!kill_reason_.empty()) last_exit_ = kill_reason_ + " (" + last_exit_ + ")";
  pid_t old_pid = pid_;
  std::vector<InflightBatch> orphans(std::make_move_iterator(inflight_.begin()),
                                     std::make_move_iterator(inflight_.end()));
  inflight_.clear();
  // The name goes now; the mapping stays while zero-copy replies still point into it (the
  // PinnedRingKeeper holds it), and the last reference unmaps it.
  if (segment_) ipc::WorkerSegment::Remove(segment_->name());
  segment_.reset();
  responses_.reset();
  request_bell_ = ipc::Doorbell();
  response_bell_ = ipc::Doorbell();

  bool clean = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == ipc::kExitOk;
  if (shutting_down || retiring_ || (state_ == SlotState::kStopping && clean && !restart_requested_)) {
    TransitionTo(SlotState::kStopped, last_exit_);
    pid_ = -1;
    return orphans;
  }
  if (restart_requested_ && clean) {
    restart_at_ = now;  // a requested replacement: no backoff, not a failure
    TransitionTo(SlotState::kBackoff, "graceful restart");
    pid_ = -1;
    return orphans;
  }
  // A reason the worker reported itself (why the model did not load) beats the exit status.
  if (!fatal_reported_) {
    failure_reason_ = "worker pid " + std::to_string(old_pid) + " " + last_exit_;
  }
  if (state_ == SlotState::kReady && now - ready_since_ >= policy.healthy_after) {
    consecutive_failures_ = 0;
  }
  const bool device_failure = device_failure_reported_ || (WIFEXITED(wait_status) &&
                                                           WEXITSTATUS(wait_status) == ipc::kExitDeviceFailure);
  last_exit_device_failure_ = device_failure && !mps_recycled_;
  // An MPS server recovering from another client's fault refuses clients for a while (807): that
  // is the server's state, not this GPU failing, so it does not count towards the fallback.
  const bool mps_fault = mps_ && (mps_recycled_ || IsMpsServerFault(failure_reason_));
  if (device_failure && device_ != "cpu" && !mps_fault) {
    ++gpu_failures_;
    if (instance_.fallback == "cpu" && gpu_failures_ >= instance_.gpu_failures_before_fallback) {
      fallback_reason_ = failure_reason_;
      TF_LOG(kWarn) << "GPU keeps failing; falling back to CPU" << Kv("worker", id_)
                    << Kv("model", model_name_) << Kv("device", device_)
                    << Kv("gpu_failures", gpu_failures_) << Kv("reason", fallback_reason_);
      device_ = "cpu";
      fallen_back_ = true;
      consecutive_failures_ = 0;
      restart_history_.clear();  // the CPU slot starts with a clean record
    }
  }
  restart_history_.push_back(now);
  while (!restart_history_.empty() && now - restart_history_.front() > policy.window) {
    restart_history_.pop_front();
  }
  if (static_cast<int>(restart_history_.size()) > policy.max_restarts) {
    TransitionTo(SlotState::kFailed, last_exit_ + "; more than " +
                                         std::to_string(policy.max_restarts) + " restarts in " +
                                         std::to_string(policy.window.count() / 1000) + " s");
    pid_ = -1;
    return orphans;
  }
  auto backoff = policy.initial_backoff * (1LL << std::min(consecutive_failures_, 20));
  backoff = std::min<Millis>(backoff, policy.max_backoff);
  // Jitter of up to 25% keeps slots that died together from restarting in lockstep.
  static std::minstd_rand jitter_source(static_cast<unsigned>(::getpid()));
  auto jitter = Millis(std::uniform_int_distribution<int64_t>(0, backoff.count() / 4)(jitter_source));
  restart_at_ = now + backoff + jitter;
  ++consecutive_failures_;
  ++restarts_;
  TransitionTo(SlotState::kBackoff, last_exit_ + "; restart in " +
                                        std::to_string((backoff + jitter).count()) + " ms");
  pid_ = -1;
  return orphans;
}

}  // namespace torchfarm
