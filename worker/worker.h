// The worker process's control thread (its main thread): speaks the control protocol
// (ipc/control_protocol.h) with the supervisor and runs the compute thread (worker/compute_loop.h).
//
// Owns: the ZeroMQ context and DEALER socket, the mapped segment, both inherited doorbells and the
// ComputeLoop (whose thread is always joined, or the process _exits, before Run returns).
//
// Run() is one poll loop over three sources: the control socket (any message is liveness; "stop"
// starts a clean stop), the compute loop's event fd (model loaded -> "ready", load failed ->
// fatal "error" and exit kExitModelLoad, thread finished -> exit), and the signal fd (SIGTERM ->
// clean stop). Between events it sends a heartbeat every heartbeat_ms and checks that the
// supervisor was heard within kLivenessHeartbeats intervals and is still its parent.
//
//   starting --hello, segment, doorbells--> loading --loaded--> serving --stop/SIGTERM--> stopping
//       |                                      |                   |                       |
//       +-- kExitSegment      kExitModelLoad --+   supervisor lost -+--> kExitSupervisorLost |
//                                                      compute thread returned -> kExitOk --+
#pragma once

#include <sys/types.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "common/clock.h"
#include "ipc/control_protocol.h"
#include "ipc/doorbell.h"
#include "ipc/worker_segment.h"
#include "worker/compute_loop.h"

namespace torchfarm::worker {

// Exit code when the compute thread returned without being asked to (an exception escaped its
// loop): a crash as far as the supervisor is concerned.
inline constexpr int kExitComputeFailed = 1;

class Worker {
 public:
  // `parent_pid`: the supervisor's pid as seen at startup; `signal_fd`: a signalfd (or -1) that
  // becomes readable on SIGTERM/SIGINT, owned by the caller; `time`: outlives the Worker.
  Worker(ipc::WorkerLaunchArgs args, pid_t parent_pid, int signal_fd, const TimeSource* time);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Runs until the worker should exit; returns the process exit code.
  int Run();

 private:
  enum class Phase { kLoading, kServing, kStopping };

  bool Setup(int* exit_code);
  int PollLoop();
  bool Poll(zmq::pollitem_t* items, size_t count);
  std::optional<int> OnComputeEvent();
  void OnControlReadable();
  void OnControlMessage(const std::string& text);
  void OnSignal();
  void BeginStop(const char* why);
  void SendHeartbeat();
  bool SupervisorLost();
  // Reports a fatal error ("kind": model|device|internal) and returns exit_code for Run.
  int FatalError(const std::string& message, int exit_code, const char* kind = "internal");
  int AbandonAndExit(int exit_code);
  void Send(const nlohmann::json& message);

  const ipc::WorkerLaunchArgs args_;
  const pid_t parent_pid_;
  const int signal_fd_;
  const TimeSource* const time_;

  zmq::context_t context_;
  zmq::socket_t socket_;
  std::unique_ptr<ipc::WorkerSegment> segment_;
  ipc::Doorbell request_doorbell_;
  ipc::Doorbell response_doorbell_;
  std::unique_ptr<ComputeLoop> compute_;

  Phase phase_ = Phase::kLoading;
  TimePoint last_heard_;
  TimePoint next_heartbeat_;
};

}  // namespace torchfarm::worker
