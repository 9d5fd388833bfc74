// How the farm's GPU workers share their devices: through an NVIDIA MPS server, or by the
// driver's time-slicing. Config: "gpu": {"mps": "off"|"auto"|"required",
// "active_thread_percentage": P, "mps_control": PATH} (docs/gpu.md).
//
// Start: with "auto"/"required" and at least one cuda:N instance, use the MPS control daemon
// already listening on $CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps), else start one with
// `nvidia-cuda-mps-control -d` and its own pipe and log directories under <run_dir>/mps. "required"
// turns any failure into a start-up error; "auto" logs it and the workers time-slice.
// Stop: quits the daemon this supervisor started (never one it found running).
//
// The supervisor never creates a CUDA context: it only runs the control binary (fork+exec) and
// looks at its socket. Workers learn the pipe directory and the thread percentage from the
// environment this class hands out (WorkerEnvironment), and report from their own CUDA context
// whether they really are attached (the heartbeat's device.mps_attached), since CUDA silently
// runs without MPS when the daemon cannot be reached.
//
// Owns: the daemon it started (quit in Stop/the destructor). Supervisor loop thread only.
#pragma once

#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"

namespace torchfarm {

class MpsController {
 public:
  MpsController() = default;
  ~MpsController() { Stop(); }
  MpsController(const MpsController&) = delete;
  MpsController& operator=(const MpsController&) = delete;

  // `has_gpu_instances`: whether any model has a cuda:N instance group.
  Status Start(const GpuConfig& config, const std::string& run_dir, bool has_gpu_instances);
  void Stop();

  bool active() const { return active_; }
  // One line for stats and logs: "off", "active (daemon started by torchfarm)",
  // "active (existing daemon)", "unavailable: <why>; GPU workers time-slice".
  const std::string& state() const { return state_; }
  const std::string& pipe_directory() const { return pipe_directory_; }
  // "NAME=VALUE" entries for every GPU worker's environment.
  std::vector<std::string> WorkerEnvironment() const;
  // Under MPS one client's fatal fault is delivered to every client of that GPU, and the server
  // refuses new clients until all of them have exited: true when a device failure on `device`
  // must recycle every worker on it.
  bool ShouldRecycleDevice(const std::string& device) const;

 private:
  Status MpsUnavailable(const std::string& why);
  Status StartDaemon();

  GpuConfig config_;
  bool active_ = false;
  bool started_daemon_ = false;
  std::string state_ = "off";
  std::string control_binary_;
  std::string pipe_directory_;
  std::string log_directory_;
};

// True when a unix socket at `path` accepts a connection (a live MPS control daemon).
bool UnixSocketAccepts(const std::string& path);

// `name` if it contains a '/', else the first executable PATH entry holding it; empty if none.
std::string FindExecutable(const std::string& name);

}  // namespace torchfarm
