#include "worker/zygote.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/control_protocol.h"
#include "worker/process_title.h"
#include "worker/reparented_fork.h"

namespace torchfarm::worker {
namespace {

using nlohmann::json;

void CloseAll(const std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
}

void CloseRange(unsigned first, unsigned last) {
  if (first > last || ::close_range(first, last, 0) == 0) return;
  for (unsigned fd = first; fd <= last && fd < 65'536; ++fd) ::close(static_cast<int>(fd));
}

// Closes every descriptor but those in `keep`.
void CloseAllBut(std::vector<unsigned> keep) {
  std::sort(keep.begin(), keep.end());
  unsigned next = 0;
  for (unsigned fd : keep) {
    if (fd > next) CloseRange(next, fd - 1);
    next = fd + 1;
  }
  CloseRange(next, UINT_MAX);
}

// In the worker child, before main runs the worker: see zygote_protocol.h.
void PrepareWorkerChild(const ipc::ZygoteLaunch& launch, const std::vector<int>& fds) {
  // The zygote ignores the terminal's and the service manager's stop signals; a worker must not.
  ::signal(SIGPIPE, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGINT, SIG_DFL);
  // As process_launcher.cc does before exec: move the sources out of the way of the targets,
  // then onto them; everything else goes.
  std::vector<int> moved(fds.size(), -1);
  for (size_t i = 0; i < fds.size(); ++i) moved[i] = ::fcntl(fds[i], F_DUPFD_CLOEXEC, 100);
  std::vector<unsigned> keep = {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO};
  for (size_t i = 0; i < fds.size(); ++i) {
    const int target = launch.targets[i];
    if (moved[i] < 0 || ::dup2(moved[i], target) < 0) std::_Exit(ipc::kExitBadArguments);
    keep.push_back(static_cast<unsigned>(target));
  }
  CloseAllBut(std::move(keep));
  for (const std::string& entry : launch.env) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    ::setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), 1);
  }
}

// In a zygote forked from a zygote: the new channel takes the old one's number (closing the
// parent's channel, which this process must never answer on), and nothing else stays open.
void BecomeZygote(int channel, int new_channel, pid_t supervisor) {
  if (::dup2(new_channel, channel) < 0) std::_Exit(ipc::kExitBadArguments);
  ::close(new_channel);
  ::fcntl(channel, F_SETFD, FD_CLOEXEC);
  CloseAllBut({STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO, static_cast<unsigned>(channel)});
  // PR_SET_PDEATHSIG is not inherited across fork; it watches the supervisor now that it is our
  // parent, and if the supervisor died before the call, we were re-parented again.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != supervisor) std::_Exit(ipc::kExitSupervisorLost);
}

// fork copies only the calling thread: a zygote with another thread (a BLAS pool some LibTorch
// builds start at load) would hand its children locks held by a thread they lack.
Status CheckSingleThreaded() {
  int threads = 0;
  if (DIR* tasks = ::opendir("/proc/self/task")) {
    while (dirent* entry = ::readdir(tasks)) threads += entry->d_name[0] != '.';
    ::closedir(tasks);
  }
  if (threads > 1) {
    return Internal("zygote: " + std::to_string(threads) +
                    " threads; forking would copy one (workers start by exec)");
  }
  return Status::Ok();
}

void Answer(int channel, const json& message) {
  ipc::SendPacket(channel, message.dump());  // a lost answer: the supervisor's wait times out
}

Status CheckRequest(const Status& received, const std::string& payload, const std::vector<int>& fds,
                    ipc::ZygoteLaunch* request) {
  Status s = received;
  if (s.ok()) s = ipc::DecodeZygoteLaunch(payload, request);
  if (s.ok()) s = CheckSingleThreaded();
  const size_t wanted = request->zygote ? 1 : request->targets.size();
  if (s.ok() && wanted != fds.size()) {
    s = InvalidArgument("zygote: " + std::to_string(fds.size()) + " descriptors for " +
                        std::to_string(wanted) + " targets");
  }
  return s;
}

}  // namespace

bool RunZygote(int channel, ipc::ZygoteLaunch* launch, int* exit_code) {
  const pid_t parent = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) {
    *exit_code = ipc::kExitSupervisorLost;
    return false;
  }
  SetProcessName(ipc::kZygoteProgramName);
  ::fcntl(channel, F_SETFD, FD_CLOEXEC);
  // A Ctrl-C or a service manager's SIGTERM to the process group stops the supervisor, which
  // stops this one by closing the channel (or by dying: PR_SET_PDEATHSIG).
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  Answer(channel, {{"type", "zygote_ready"}, {"pid", ::getpid()}});
  for (;;) {
    std::string payload;
    std::vector<int> fds;
    Status received = ipc::ReceivePacket(channel, -1, &payload, &fds);
    if (!received.ok() && received.code() != StatusCode::kInvalidArgument) {
      *exit_code = ipc::kExitOk;
      return false;  // the supervisor closed the channel (or stops): nothing more to launch
    }
    ipc::ZygoteLaunch request;
    if (Status s = CheckRequest(received, payload, fds, &request); !s.ok()) {
      CloseAll(fds);
      Answer(channel, {{"type", "failed"}, {"error", s.message()}});
      continue;
    }
    int error = 0;
    // A worker goes by its own name from its first instruction on (ps, a storm's victim list).
    const pid_t child = ForkReparentedChild(
        request.supervisor, request.zygote ? std::string() : ipc::kWorkerProgramName, &error);
    if (child == 0) {
      if (request.zygote) {
        BecomeZygote(channel, fds[0], request.supervisor);
        Answer(channel, {{"type", "zygote_ready"}, {"pid", ::getpid()}});
        continue;  // a zygote now, serving its own channel
      }
      ::close(channel);
      PrepareWorkerChild(request, fds);
      *launch = std::move(request);
      return true;
    }
    CloseAll(fds);  // the child has its copies
    if (child > 0) {
      Answer(channel, {{"type", "launched"}, {"pid", child}});
    } else {
      Answer(channel,
             {{"type", "failed"}, {"error", std::string("fork: ") + std::strerror(error)}});
    }
  }
}

}  // namespace torchfarm::worker
