#include "worker/reparented_fork.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "ipc/control_protocol.h"
#include "worker/process_title.h"

namespace torchfarm::worker {
namespace {

constexpr int kReparentWaitMs = 2'000;

// In the grandchild: the intermediate child exits right after forking us; until it has, our
// parent is not yet the supervisor, and PR_SET_PDEATHSIG would watch the wrong process. The
// intermediate's pid comes from the intermediate itself, not from getppid() here: when it has
// exited already, getppid() is the supervisor, and waiting "while the parent is getppid()" would
// last the whole bound (2.8 s seen on every second zygote launch).
void AwaitSupervisorAsParent(pid_t intermediate, pid_t supervisor) {
  for (int waited = 0; ::getppid() == intermediate && waited < kReparentWaitMs * 10; ++waited) {
    ::usleep(100);
  }
  if (::getppid() != supervisor) {
    std::fprintf(stderr,
                 "torchfarm-worker: zygote child not re-parented to the supervisor "
                 "(pid %d, parent now %d)\n",
                 static_cast<int>(supervisor), static_cast<int>(::getppid()));
    std::_Exit(ipc::kExitSupervisorLost);
  }
}

}  // namespace

pid_t ForkReparentedChild(pid_t supervisor, const std::string& child_name, int* error) {
  int pid_pipe[2];
  if (::pipe2(pid_pipe, O_CLOEXEC) != 0) {
    *error = errno;
    return -1;
  }
  const pid_t intermediate = ::fork();
  if (intermediate == 0) {
    ::close(pid_pipe[0]);
    const pid_t self = ::getpid();
    const pid_t grandchild = ::fork();
    if (grandchild == 0) {
      ::close(pid_pipe[1]);
      if (!child_name.empty()) SetProcessName(child_name);
      AwaitSupervisorAsParent(self, supervisor);
      return 0;
    }
    const int result[2] = {static_cast<int>(grandchild), errno};
    ssize_t ignored = ::write(pid_pipe[1], result, sizeof(result));
    (void)ignored;
    std::_Exit(0);
  }
  *error = errno;
  ::close(pid_pipe[1]);
  int result[2] = {-1, *error};
  if (intermediate > 0) {
    ssize_t n;
    do {
      n = ::read(pid_pipe[0], result, sizeof(result));
    } while (n < 0 && errno == EINTR);
    if (n != sizeof(result)) result[0] = -1;
    int status = 0;
    ::waitpid(intermediate, &status, 0);
  }
  ::close(pid_pipe[0]);
  *error = result[1];
  return result[0] > 0 ? result[0] : -1;
}

}  // namespace torchfarm::worker
