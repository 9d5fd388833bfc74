// Signals as a file descriptor, so the supervisor's one poll loop sees them like any other event.
//
// Owns: the signalfd and the blocked signal mask of the process (restored on destruction). No
// handler runs: nothing is logged or allocated in signal context. Children get an unblocked mask
// from ProcessLauncher before exec.
#pragma once

#include <csignal>
#include <vector>

#include "common/status.h"

namespace torchfarm {

class SignalFd {
 public:
  SignalFd() = default;
  ~SignalFd();
  SignalFd(const SignalFd&) = delete;
  SignalFd& operator=(const SignalFd&) = delete;

  // Blocks `signals` in the calling thread (call before any other thread starts) and opens a
  // non-blocking signalfd for them.
  Status Open(const std::vector<int>& signals);
  // Signals received since the last call, in arrival order (duplicates of one signal may merge).
  std::vector<int> ReadPending();
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  sigset_t previous_mask_{};
};

// "SIGKILL" for 9, "signal 64" for unknown numbers.
const char* SignalName(int signo);

}  // namespace torchfarm
