// accept() and accept4() of the torchfarm-supervisor binary: every library in the process (libzmq,
// Boost.Asio, gRPC, prometheus-cpp's civetweb) resolves them here first, so each accepted
// connection passes the AcceptGuard (supervisor/security/accept_guard.h) before its library sees
// it. Linked into the executable only: unit tests and tools keep the C library's.
//
// Runs in whichever thread accepts; async-signal-safe steps only (a system call and atomics).
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "supervisor/security/accept_guard.h"

namespace {

int GuardedAccept(int listener, sockaddr* address, socklen_t* length, int flags) {
  // The system call itself, not the C library's wrapper: that wrapper is this function.
  const long fd = ::syscall(SYS_accept4, listener, address, length, flags);
  int error = fd < 0 ? errno : 0;
  const int kept =
      torchfarm::AcceptGuard::Instance().Filter(listener, static_cast<int>(fd), &error);
  if (kept < 0) errno = error;
  return kept;
}

// Marks the guard live before main(): stats say whether accepts are guarded.
[[maybe_unused]] const bool kMarked = [] {
  torchfarm::AcceptGuard::Instance().MarkInterposed();
  return true;
}();

}  // namespace

extern "C" {

int accept(int listener, sockaddr* address, socklen_t* length) {
  return GuardedAccept(listener, address, length, 0);
}

int accept4(int listener, sockaddr* address, socklen_t* length, int flags) {
  return GuardedAccept(listener, address, length, flags);
}

}  // extern "C"
