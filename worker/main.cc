// torchfarm-worker: one process serving one TorchScript model, started by torchfarm-supervisor
// with the arguments of ipc::WorkerLaunchArgs, by exec or forked from a zygote (this binary
// exec'd as `torchfarm-zygote --zygote FD`, ipc/zygote_protocol.h). Exit codes:
// ipc/control_protocol.h (kExit*), plus worker::kExitComputeFailed.
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "ipc/control_protocol.h"
#include "ipc/guarded_copy.h"
#include "worker/private_temp_dir.h"
#include "worker/process_title.h"
#include "worker/worker.h"
#include "worker/zygote.h"

namespace {

// Owns a signalfd for SIGTERM and SIGINT. Construct it before any thread starts: the signals are
// blocked in the calling thread and every thread it starts later (ZeroMQ's, torch's), so they
// reach the process only through the fd the control loop polls; no handler runs.
class StopSignalFd {
 public:
  StopSignalFd() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if (::sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return;
    fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  }
  ~StopSignalFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  StopSignalFd(const StopSignalFd&) = delete;
  StopSignalFd& operator=(const StopSignalFd&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// "torchfarm-worker worker=N" over the inherited "torchfarm-zygote --zygote 3" (the same room).
void NameForkedWorker(int argc, char** argv, const std::vector<std::string>& worker_argv) {
  std::vector<std::string> words = {torchfarm::ipc::kWorkerProgramName};
  auto id = std::find(worker_argv.begin(), worker_argv.end(), "--worker-id");
  if (id != worker_argv.end() && id + 1 != worker_argv.end())
    words.push_back("worker=" + *(id + 1));
  torchfarm::worker::RewriteCommandLine(argc, argv, words);
  torchfarm::worker::SetProcessName(torchfarm::ipc::kWorkerProgramName);
}

}  // namespace

static int RunWorker(int argc, char** argv) {
  namespace ipc = torchfarm::ipc;
  const pid_t parent = ::getppid();
  ipc::WorkerLaunchArgs args;
  torchfarm::Status status = ipc::WorkerLaunchArgs::Parse(argc, argv, &args);
  if (!status.ok()) {
    std::fprintf(stderr, "torchfarm-worker: %s\n", status.message().c_str());
    return ipc::kExitBadArguments;
  }
  torchfarm::LogLevel level;
  if (!torchfarm::ParseLogLevel(args.log_level, &level)) {
    std::fprintf(stderr,
                 "torchfarm-worker: --log-level: expected debug|info|warn|error, got '%s'\n",
                 args.log_level.c_str());
    return ipc::kExitBadArguments;
  }
  // Die with the supervisor. The supervisor may have died between fork and this call, in which
  // case the death signal will never come: we were already re-parented.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
    std::fprintf(stderr, "torchfarm-worker: prctl(PR_SET_PDEATHSIG) failed: %s\n",
                 std::strerror(errno));
  }
  if (::getppid() != parent) {
    std::fprintf(stderr, "torchfarm-worker: supervisor (pid %d) exited before the worker started\n",
                 static_cast<int>(parent));
    return ipc::kExitSupervisorLost;
  }
  torchfarm::SetLogLevel(level);
  torchfarm::SetLogContext("worker=" + std::to_string(args.worker_id) +
                           " pid=" + std::to_string(::getpid()) + " model=" + args.model_name);
  // A dead peer must show up as an error return, not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  // A client that truncates its region fails its request, not this worker (compute_loop.h).
  torchfarm::ipc::InstallBusGuard();

  // Before the model loads and before any thread: LibTorch unpacks AOTInductor packages under
  // TMPDIR, and a killed worker's folder is swept by the next worker to start.
  torchfarm::worker::PrivateTempDir scratch;
  if (torchfarm::Status s = torchfarm::worker::PrivateTempDir::Enter(&scratch); !s.ok()) {
    TF_LOG(kWarn) << s.message() << "; TMPDIR left as it was";
  } else if (scratch.swept() > 0) {
    TF_LOG(kInfo) << "removed the scratch folders of exited workers"
                  << torchfarm::Kv("count", scratch.swept());
  }
  StopSignalFd stop_signals;
  if (stop_signals.fd() < 0) {
    TF_LOG(kWarn) << "no signalfd; SIGTERM will not stop the worker cleanly"
                  << torchfarm::Kv("error", std::strerror(errno));
  }
  torchfarm::SteadyTimeSource time;
  torchfarm::worker::Worker worker(std::move(args), parent, stop_signals.fd(), &time);
  return worker.Run();
}

int main(int argc, char** argv) {
  // AOTInductor packages check their inputs' shapes themselves when this is set; it is read once
  // by each package's code, and set here, before any thread (a zygote's children inherit it),
  // because setenv races with getenv on other threads (worker/aoti_model_runner.cc).
  ::setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", /*overwrite=*/1);
  if (argc == 3 && std::strcmp(argv[1], torchfarm::ipc::kZygoteFlag) == 0) {
    char* end = nullptr;
    const long channel = std::strtol(argv[2], &end, 10);
    if (*argv[2] == '\0' || *end != '\0' || channel < 0 || channel > 1'000'000) {
      std::fprintf(stderr, "torchfarm-worker: --zygote: expected a descriptor number, got '%s'\n",
                   argv[2]);
      return torchfarm::ipc::kExitBadArguments;
    }
    torchfarm::ipc::ZygoteLaunch launch;
    int exit_code = 0;
    if (!torchfarm::worker::RunZygote(static_cast<int>(channel), &launch, &exit_code)) {
      return exit_code;
    }
    // A worker child: named as a worker for ps (it inherited the zygote's command line and
    // name), and its own argv, as if exec'd with it.
    NameForkedWorker(argc, argv, launch.argv);
    std::vector<char*> child_argv;
    for (std::string& arg : launch.argv) child_argv.push_back(arg.data());
    child_argv.push_back(nullptr);
    return RunWorker(static_cast<int>(launch.argv.size()), child_argv.data());
  }
  return RunWorker(argc, argv);
}
