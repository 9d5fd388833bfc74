#include "supervisor/workers/mps_controller.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/log.h"
#include "common/unique_fd.h"
#include "supervisor/workers/process_launcher.h"

namespace torchfarm {
namespace {

constexpr const char* kDefaultPipeDirectory = "/tmp/nvidia-mps";
constexpr auto kControlTimeout = std::chrono::seconds(10);
constexpr auto kSocketWait = std::chrono::seconds(5);

// Runs `argv` with `env` ("NAME=VALUE" added to the supervisor's environment), feeding `input` on
// stdin; waits up to kControlTimeout. Ok when it exited 0; otherwise why it did not.
Status RunControl(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                  const std::string& input) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return Internal("pipe: " + std::string(std::strerror(errno)));
  }
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  pid_t pid = -1;
  Status launched = LaunchProcess(argv, {{read_end.get(), STDIN_FILENO}}, &pid, env);
  read_end.Reset();
  if (!launched.ok()) return Internal("cannot run " + argv[0] + ": " + launched.message());
  if (!input.empty() && ::write(write_end.get(), input.data(), input.size()) < 0) {
    TF_LOG(kWarn) << "cannot write to the MPS control binary" << Kv("error", std::strerror(errno));
  }
  write_end.Reset();
  const auto deadline = std::chrono::steady_clock::now() + kControlTimeout;
  int wait_status = 0;
  for (;;) {
    pid_t done = ::waitpid(pid, &wait_status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR)
      return Internal("waitpid: " + std::string(std::strerror(errno)));
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &wait_status, 0);
      return Internal(argv[0] + " did not finish within 10 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    return Internal(argv[0] + " failed: " + DescribeWaitStatus(wait_status));
  }
  return Status::Ok();
}

std::string LastLines(const std::string& path, int lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string tail;
  for (size_t i = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0; i < all.size();
       ++i) {
    tail += (tail.empty() ? "" : " | ") + all[i];
  }
  return tail;
}

}  // namespace

bool UnixSocketAccepts(const std::string& path) {
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) return false;
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool accepted = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return accepted;
}

std::string FindExecutable(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

Status MpsController::Start(const GpuConfig& config, const std::string& run_dir,
                            bool has_gpu_instances) {
  config_ = config;
  if (config.mps == "off") {
    state_ = "off";
    return Status::Ok();
  }
  if (!has_gpu_instances) {
    state_ = "off (no cuda instances)";
    return Status::Ok();
  }
  const char* env_pipe = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string existing = env_pipe && *env_pipe ? env_pipe : kDefaultPipeDirectory;
  if (UnixSocketAccepts(existing + "/control")) {
    active_ = true;
    pipe_directory_ = existing;
    state_ = "active (existing daemon, pipe directory " + existing + ")";
    TF_LOG(kInfo) << "using the running MPS control daemon" << Kv("pipe_directory", existing);
    return Status::Ok();
  }
  control_binary_ = FindExecutable(config.mps_control);
  if (control_binary_.empty()) {
    const char* path = std::getenv("PATH");
    return MpsUnavailable("no MPS daemon listens on " + existing + "/control and " +
                          config.mps_control +
                          (config.mps_control.find('/') != std::string::npos
                               ? " is not an executable file"
                               : " was not found on PATH (" + std::string(path ? path : "") + ")"));
  }
  pipe_directory_ = run_dir + "/mps/pipe";
  log_directory_ = run_dir + "/mps/log";
  std::error_code ec;
  for (const auto& dir : {pipe_directory_, log_directory_}) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return MpsUnavailable("cannot create " + dir + ": " + ec.message());
  }
  return StartDaemon();
}

Status MpsController::StartDaemon() {
  const std::vector<std::string> env = {"CUDA_MPS_PIPE_DIRECTORY=" + pipe_directory_,
                                        "CUDA_MPS_LOG_DIRECTORY=" + log_directory_};
  // A socket left by a daemon of an earlier run that died would make the check below lie.
  ::unlink((pipe_directory_ + "/control").c_str());
  Status run = RunControl({control_binary_, "-d"}, env, "");
  if (!run.ok()) return MpsUnavailable(run.message());
  const auto deadline = std::chrono::steady_clock::now() + kSocketWait;
  while (!UnixSocketAccepts(pipe_directory_ + "/control")) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::string log = LastLines(log_directory_ + "/control.log", 3);
      return MpsUnavailable(control_binary_ + " -d ran but no daemon listens on " +
                            pipe_directory_ + "/control after 5 s" +
                            (log.empty() ? "" : " (control.log: " + log + ")"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  active_ = true;
  started_daemon_ = true;
  state_ = "active (daemon started by torchfarm, pipe directory " + pipe_directory_ + ")";
  TF_LOG(kInfo) << "MPS control daemon started" << Kv("binary", control_binary_)
                << Kv("pipe_directory", pipe_directory_) << Kv("log_directory", log_directory_);
  return Status::Ok();
}

Status MpsController::MpsUnavailable(const std::string& why) {
  if (config_.mps == "required") {
    state_ = "unavailable: " + why;
    return torchfarm::Unavailable("config.gpu.mps is \"required\" but MPS cannot run: " + why +
                                  " (install the NVIDIA MPS tools, start the daemon, e.g. "
                                  "configs/torchfarm-mps.service, or set \"mps\": \"auto\")");
  }
  state_ = "unavailable: " + why + "; GPU workers time-slice";
  TF_LOG(kWarn) << "MPS unavailable; GPU workers share their devices by time-slicing"
                << Kv("why", why);
  return Status::Ok();
}

void MpsController::Stop() {
  if (!started_daemon_) return;
  started_daemon_ = false;
  active_ = false;
  const std::vector<std::string> env = {"CUDA_MPS_PIPE_DIRECTORY=" + pipe_directory_,
                                        "CUDA_MPS_LOG_DIRECTORY=" + log_directory_};
  Status quit = RunControl({control_binary_}, env, "quit\n");
  if (!quit.ok()) {
    TF_LOG(kWarn) << "cannot stop the MPS control daemon" << Kv("error", quit.message());
  } else {
    TF_LOG(kInfo) << "MPS control daemon stopped" << Kv("pipe_directory", pipe_directory_);
  }
  state_ = "off";
}

std::vector<std::string> MpsController::WorkerEnvironment() const {
  std::vector<std::string> env;
  if (!active_) return env;
  env.push_back("CUDA_MPS_PIPE_DIRECTORY=" + pipe_directory_);
  if (!log_directory_.empty()) env.push_back("CUDA_MPS_LOG_DIRECTORY=" + log_directory_);
  if (config_.active_thread_percentage > 0) {
    env.push_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" +
                  std::to_string(config_.active_thread_percentage));
  }
  return env;
}

bool MpsController::ShouldRecycleDevice(const std::string& device) const {
  return active_ && device.rfind("cuda", 0) == 0;
}

}  // namespace torchfarm
