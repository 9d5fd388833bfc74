#include "supervisor/workers/process_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "supervisor/loop/signal_fd.h"

extern char** environ;

namespace torchfarm {
namespace {

// The supervisor's environment with `overrides` ("NAME=VALUE") replacing or adding entries.
std::vector<std::string> EnvironmentWith(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string item(*entry);
    bool replaced = false;
    for (const auto& o : overrides) {
      const size_t name_end = o.find('=') + 1;  // compare "NAME=" prefixes
      if (item.compare(0, name_end, o, 0, name_end) == 0) replaced = true;
    }
    if (!replaced) env.push_back(std::move(item));
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

// Closes fds [first, last] in the child (async-signal-safe). Without close_range (Linux < 5.9),
// one by one up to `fallback_limit`.
void CloseFds(unsigned first, unsigned last, unsigned fallback_limit) {
  if (first > last || ::close_range(first, last, 0) == 0) return;
  for (unsigned fd = first; fd <= last && fd < fallback_limit; ++fd) ::close(static_cast<int>(fd));
}

}  // namespace

Status LaunchProcess(const std::vector<std::string>& argv, const std::vector<FdMapping>& fds,
                     pid_t* pid, const std::vector<std::string>& extra_env) {
  if (argv.empty()) return InvalidArgument("launch: empty argv");
  return LaunchProgram(argv[0], argv, fds, pid, extra_env);
}

Status LaunchProgram(const std::string& program, const std::vector<std::string>& argv,
                     const std::vector<FdMapping>& fds, pid_t* pid,
                     const std::vector<std::string>& extra_env) {
  // Everything the child needs is prepared here: after fork only async-signal-safe calls run.
  std::vector<char*> raw;
  raw.reserve(argv.size() + 1);
  for (const auto& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);
  const std::vector<std::string> env =
      extra_env.empty() ? std::vector<std::string>{} : EnvironmentWith(extra_env);
  std::vector<char*> raw_env;
  for (const auto& e : env) raw_env.push_back(const_cast<char*>(e.c_str()));
  raw_env.push_back(nullptr);
  const pid_t parent = ::getpid();
  // The child keeps stdio and the mapped fds, nothing else the supervisor inherited or opened
  // without close-on-exec (a shell's or a service manager's descriptors).
  std::vector<unsigned> keep = {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO};
  for (const FdMapping& m : fds) keep.push_back(static_cast<unsigned>(m.target));
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  rlimit files{};
  const unsigned fallback_limit =
      ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < (1u << 16)
          ? static_cast<unsigned>(files.rlim_cur)
          : 1u << 16;

  pid_t child = ::fork();
  if (child < 0) return Internal(std::string("fork failed: ") + std::strerror(errno));
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    sigset_t empty;
    sigemptyset(&empty);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    // Move sources out of the way of targets first, so one mapping cannot clobber another. The
    // copies are close-on-exec: only the targets (dup2 clears the flag) reach the worker.
    int moved[16];
    size_t n = fds.size() < 16 ? fds.size() : 16;
    for (size_t i = 0; i < n; ++i) moved[i] = ::fcntl(fds[i].source, F_DUPFD_CLOEXEC, 100);
    for (size_t i = 0; i < n; ++i) {
      if (moved[i] < 0 || ::dup2(moved[i], fds[i].target) < 0) ::_exit(127);
      // dup2 onto itself keeps the flag: a target that is its own copy must stay open.
      if (moved[i] == fds[i].target && ::fcntl(moved[i], F_SETFD, 0) < 0) ::_exit(127);
    }
    unsigned next = 0;
    for (unsigned fd : keep) {
      if (fd > next) CloseFds(next, fd - 1, fallback_limit);
      next = fd + 1;
    }
    CloseFds(next, UINT_MAX, fallback_limit);
    if (env.empty()) {
      ::execv(program.c_str(), raw.data());
    } else {
      ::execve(program.c_str(), raw.data(), raw_env.data());
    }
    const char msg[] = "torchfarm: exec of worker binary failed\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)ignored;
    ::_exit(127);
  }
  *pid = child;
  return Status::Ok();
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return "exit code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    std::string name = SignalName(sig);
    if (name == "signal") name += " " + std::to_string(sig);
    return "killed by " + name;
  }
  return "status " + std::to_string(wait_status);
}

}  // namespace torchfarm
