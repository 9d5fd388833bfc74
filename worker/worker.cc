#include "worker/worker.h"

#include <fcntl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "common/config.h"
#include "common/log.h"

namespace torchfarm::worker {
namespace {

// After a supervisor loss the compute thread gets this long to finish its batch before the
// process exits without joining it (see AbandonAndExit).
constexpr auto kAbandonJoinTimeout = std::chrono::seconds(2);
// How long a fatal "error" message may take to leave the socket before the process exits.
constexpr int kFatalLingerMs = 1000;

}  // namespace

Worker::Worker(ipc::WorkerLaunchArgs args, pid_t parent_pid, int signal_fd, const TimeSource* time)
    : args_(std::move(args)),
      parent_pid_(parent_pid),
      signal_fd_(signal_fd),
      time_(time),
      context_(1),
      socket_(context_, zmq::socket_type::dealer) {}

// Members go in reverse order: the compute thread is joined before the doorbells and the segment
// it uses are released, and the socket closes before the context terminates.
Worker::~Worker() = default;

int Worker::Run() {
  try {
    int exit_code = ipc::kExitOk;
    if (!Setup(&exit_code)) return exit_code;
    return PollLoop();
  } catch (const zmq::error_t& e) {
    TF_LOG(kError) << "control channel failed" << Kv("error", e.what());
    return AbandonAndExit(ipc::kExitSupervisorLost);
  }
}

bool Worker::Setup(int* exit_code) {
  socket_.set(zmq::sockopt::routing_id, args_.RoutingId());
  socket_.set(zmq::sockopt::linger, 0);
  try {
    socket_.connect(args_.control_endpoint);
  } catch (const zmq::error_t& e) {
    TF_LOG(kError) << "cannot connect control socket" << Kv("endpoint", args_.control_endpoint)
                   << Kv("error", e.what());
    *exit_code = ipc::kExitBadArguments;
    return false;
  }
  Send({{"type", ipc::kMsgHello},
        {"worker", args_.worker_id},
        {"generation", args_.generation},
        {"pid", static_cast<int64_t>(::getpid())},
        {"layout_version", ipc::kLayoutVersion},
        {"device", args_.device}});
  Status status = ipc::WorkerSegment::Open(args_.segment, &segment_);
  if (!status.ok()) {
    *exit_code = FatalError(status.message(), ipc::kExitSegment);
    return false;
  }
  for (int fd : {args_.request_doorbell_fd, args_.response_doorbell_fd}) {
    if (::fcntl(fd, F_GETFD) < 0) {
      *exit_code = FatalError("doorbell fd " + std::to_string(fd) + " is not open in the worker",
                              ipc::kExitSegment);
      return false;
    }
  }
  request_doorbell_ = ipc::Doorbell::Adopt(args_.request_doorbell_fd);
  response_doorbell_ = ipc::Doorbell::Adopt(args_.response_doorbell_fd);
  ComputeLoopConfig config;
  config.model_path = args_.model_path;
  config.model_format = args_.model_format;
  config.model_optimize = args_.model_optimize;
  config.device = args_.device;
  config.threads = args_.threads;
  config.cores = args_.cores;
  config.precision = args_.precision;
  config.accelerator.streams = args_.streams;
  config.accelerator.cudnn_benchmark = args_.cudnn_benchmark;
  config.accelerator.pin_memory = args_.pin_memory;
  config.idle_spin_us = args_.idle_spin_us;
  if (!args_.warmup.empty()) {
    status = WarmupFromJson(args_.warmup, &config.warmup);
    if (!status.ok()) {
      *exit_code = FatalError(status.message(), ipc::kExitBadArguments);
      return false;
    }
  }
  if (!args_.probe.empty()) {
    if (status = WarmupFromJson(args_.probe, &config.probe); !status.ok()) {
      *exit_code = FatalError(status.message(), ipc::kExitBadArguments);
      return false;
    }
  }
  if (status = PipelineFromJson(args_.pipeline, &config.pipeline); !status.ok()) {
    *exit_code = FatalError(status.message(), ipc::kExitBadArguments);
    return false;
  }
  config.faults = FaultPlan::FromEnvironment(args_.worker_id, args_.generation);
  compute_ = std::make_unique<ComputeLoop>(std::move(config), segment_.get(), &request_doorbell_,
                                           &response_doorbell_);
  status = compute_->Start();
  if (!status.ok()) {
    *exit_code = FatalError(status.message(), kExitComputeFailed);
    return false;
  }
  last_heard_ = time_->Now();
  next_heartbeat_ = last_heard_ + Millis(args_.heartbeat_ms);
  TF_LOG(kInfo) << "worker started" << Kv("segment", args_.segment)
                << Kv("endpoint", args_.control_endpoint);
  return true;
}

int Worker::PollLoop() {
  for (;;) {
    zmq::pollitem_t items[] = {
        {socket_.handle(), 0, ZMQ_POLLIN, 0},
        {nullptr, compute_->events().fd(), ZMQ_POLLIN, 0},
        {nullptr, signal_fd_, ZMQ_POLLIN, 0},
    };
    const size_t count = signal_fd_ >= 0 ? 3 : 2;
    if (Poll(items, count)) {
      if (items[0].revents & ZMQ_POLLIN) OnControlReadable();
      if (count == 3 && (items[2].revents & ZMQ_POLLIN)) OnSignal();
      if (items[1].revents & ZMQ_POLLIN) {
        if (std::optional<int> exit_code = OnComputeEvent()) return *exit_code;
      }
    }
    if (SupervisorLost()) return AbandonAndExit(ipc::kExitSupervisorLost);
    if (time_->Now() >= next_heartbeat_) SendHeartbeat();
  }
}

bool Worker::Poll(zmq::pollitem_t* items, size_t count) {
  const auto wait = std::max(Clock::duration::zero(), next_heartbeat_ - time_->Now());
  // Round up so the loop does not spin through the last sub-millisecond before a heartbeat.
  const auto timeout = std::chrono::ceil<std::chrono::milliseconds>(wait);
  try {
    return zmq::poll(items, count, timeout) > 0;
  } catch (const zmq::error_t& e) {
    // SIGSTOP/SIGCONT (chaos tests) can interrupt poll without any handler installed.
    if (e.num() == EINTR) return false;
    throw;
  }
}

std::optional<int> Worker::OnComputeEvent() {
  compute_->events().Drain();
  // finished() before load_report(): the thread reports its load before it finishes, so a
  // finished thread's report is final.
  const bool finished = compute_->finished();
  const LoadReport report = compute_->load_report();
  if (finished) {
    compute_->Join();
    if (report.state == LoadState::kFailed && report.device_failure) {
      return FatalError("device " + args_.device + " unusable: " + report.error,
                        ipc::kExitDeviceFailure, "device");
    }
    if (report.state == LoadState::kFailed) {
      return FatalError("cannot load model '" + args_.model_path + "': " + report.error,
                        ipc::kExitModelLoad, "model");
    }
    if (std::string device_error = compute_->fatal_device_error(); !device_error.empty()) {
      return FatalError("device " + args_.device + " failed: " + device_error,
                        ipc::kExitDeviceFailure, "device");
    }
    if (phase_ == Phase::kStopping) {
      TF_LOG(kInfo) << "worker stopped" << Kv("batches", compute_->stats().batches);
      return ipc::kExitOk;
    }
    return FatalError("the compute thread stopped unexpectedly (see its log line)",
                      kExitComputeFailed);
  }
  // A failed load is answered above, once the thread (which returns right after) has finished.
  if (phase_ == Phase::kLoading && report.state == LoadState::kLoaded) {
    phase_ = Phase::kServing;
    nlohmann::json ready = {{"type", ipc::kMsgReady},
                            {"load_ms", report.load_ms},
                            {"warmup_ms", report.warmup_ms},
                            {"threads", args_.threads},
                            {"device", args_.device},
                            {"precision", args_.precision}};
    if (report.warmup_outputs_known) {
      ready["outputs"] = ipc::ReadyOutputsJson(report.warmup_outputs);
    }
    Send(ready);
    TF_LOG(kInfo) << "worker ready" << Kv("load_ms", report.load_ms);
  }
  return std::nullopt;
}

void Worker::OnControlReadable() {
  zmq::message_t message;
  while (socket_.recv(message, zmq::recv_flags::dontwait)) {
    last_heard_ = time_->Now();  // any message counts as liveness
    OnControlMessage(message.to_string());
  }
}

void Worker::OnControlMessage(const std::string& text) {
  const nlohmann::json message = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!message.is_object() || !message.contains("type") || !message["type"].is_string()) {
    TF_LOG(kWarn) << "ignoring malformed control message" << Kv("message", text);
    return;
  }
  const std::string type = message["type"].get<std::string>();
  if (type == ipc::kMsgAck) return;
  if (type == ipc::kMsgStop) {
    BeginStop("supervisor sent stop");
    return;
  }
  TF_LOG(kWarn) << "ignoring unknown control message" << Kv("type", type);
}

void Worker::OnSignal() {
  signalfd_siginfo info{};
  if (::read(signal_fd_, &info, sizeof(info)) != static_cast<ssize_t>(sizeof(info))) return;
  TF_LOG(kInfo) << "signal received" << Kv("signal", ::strsignal(static_cast<int>(info.ssi_signo)))
                << Kv("from_pid", info.ssi_pid);
  BeginStop("signal");
}

void Worker::BeginStop(const char* why) {
  if (phase_ == Phase::kStopping) return;
  TF_LOG(kInfo) << "stopping: finishing batches already in the ring" << Kv("why", why);
  phase_ = Phase::kStopping;
  compute_->RequestStop(StopMode::kFinishRing);
}

void Worker::SendHeartbeat() {
  const ComputeStats stats = compute_->stats();
  nlohmann::json device = {{"name", stats.device.name},
                            {"streams", stats.device.streams},
                            {"pinned", stats.device.pinned},
                            {"mps_attached", stats.device.mps_attached}};
  if (stats.device.memory_allocated >= 0) {
    device["memory_allocated"] = stats.device.memory_allocated;
    device["memory_reserved"] = stats.device.memory_reserved;
  }
  Send({{"type", ipc::kMsgHeartbeat},
        {"batches", stats.batches},
        {"rows", stats.rows},
        {"errors", stats.errors},
        {"busy", stats.busy},
        {"stage_us", {{"h2d", stats.h2d_us}, {"compute", stats.compute_us}, {"d2h", stats.d2h_us}}},
        {"device", std::move(device)}});
  const TimePoint now = time_->Now();
  next_heartbeat_ += Millis(args_.heartbeat_ms);
  // After a stall (SIGSTOP, a slow machine) send one heartbeat, not a burst of missed ones.
  if (next_heartbeat_ <= now) next_heartbeat_ = now + Millis(args_.heartbeat_ms);
}

bool Worker::SupervisorLost() {
  if (::getppid() != parent_pid_) {
    TF_LOG(kError) << "supervisor process is gone" << Kv("parent_pid", parent_pid_);
    return true;
  }
  const auto silence = time_->Now() - last_heard_;
  const auto limit = Millis(int64_t{args_.heartbeat_ms} * ipc::kLivenessHeartbeats);
  if (silence > limit) {
    TF_LOG(kError) << "supervisor silent; exiting"
                   << Kv("silent_ms", std::chrono::duration_cast<Millis>(silence).count())
                   << Kv("limit_ms", limit.count());
    return true;
  }
  return false;
}

int Worker::FatalError(const std::string& message, int exit_code, const char* kind) {
  TF_LOG(kError) << "fatal error" << Kv("error", message) << Kv("exit_code", exit_code);
  Send({{"type", ipc::kMsgError}, {"fatal", true}, {"kind", kind}, {"message", message}});
  // Linger 0 would drop the message on close; give it a bounded time to reach the supervisor.
  socket_.set(zmq::sockopt::linger, kFatalLingerMs);
  return exit_code;
}

int Worker::AbandonAndExit(int exit_code) {
  if (compute_ == nullptr) return exit_code;
  compute_->RequestStop(StopMode::kAbandon);
  if (compute_->JoinFor(kAbandonJoinTimeout)) return exit_code;
  // The compute thread is inside forward(), which cannot be interrupted. Returning would destroy
  // a joinable std::thread (std::terminate), and waiting longer keeps a worker alive whose
  // supervisor is gone. _exit skips destructors; the kernel releases the mapping and the fds, and
  // the log has been written line by line with write(2), so nothing buffered is lost.
  TF_LOG(kError) << "compute thread still busy; exiting without joining it"
                 << Kv("exit_code", exit_code);
  ::_exit(exit_code);
}

void Worker::Send(const nlohmann::json& message) {
  // Replace invalid UTF-8 (a model path is arbitrary bytes) instead of throwing.
  const std::string text = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (!socket_.send(zmq::buffer(text), zmq::send_flags::dontwait)) {
    TF_LOG(kWarn) << "control message dropped: send queue full"
                  << Kv("type", message.value("type", std::string()));
  }
}

}  // namespace torchfarm::worker
