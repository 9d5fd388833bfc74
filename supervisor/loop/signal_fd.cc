#include "supervisor/loop/signal_fd.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace torchfarm {

SignalFd::~SignalFd() {
  if (fd_ >= 0) {
    ::close(fd_);
    pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
  }
}

Status SignalFd::Open(const std::vector<int>& signals) {
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : signals) sigaddset(&mask, s);
  if (pthread_sigmask(SIG_BLOCK, &mask, &previous_mask_) != 0) {
    return Internal("cannot block signals");
  }
  fd_ = ::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) return Internal(std::string("signalfd failed: ") + std::strerror(errno));
  return Status::Ok();
}

std::vector<int> SignalFd::ReadPending() {
  std::vector<int> out;
  signalfd_siginfo info;
  while (::read(fd_, &info, sizeof(info)) == sizeof(info)) {
    out.push_back(static_cast<int>(info.ssi_signo));
  }
  return out;
}

const char* SignalName(int signo) {
  switch (signo) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGCHLD: return "SIGCHLD";
    case SIGSTOP: return "SIGSTOP";
    case SIGXCPU: return "SIGXCPU";
    default: return "signal";
  }
}

}  // namespace torchfarm
