#include "supervisor/security/accept_guard.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace torchfarm {

namespace {

bool IsUnixSocket(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return false;
  return address.ss_family == AF_UNIX;
}

}  // namespace

AcceptVerdict DecideAccept(int fd, bool job_listener, bool unix_peer, int64_t job_connections,
                           int64_t max_connections, int64_t descriptor_limit) {
  // Linux hands out the lowest free descriptor: one this high means every one below is taken.
  const bool in_reserve = descriptor_limit > 0 && fd >= descriptor_limit - kDescriptorReserve;
  if (in_reserve && (job_listener || !unix_peer)) return AcceptVerdict::kRefuseReserve;
  if (job_listener && max_connections > 0 && job_connections >= max_connections) {
    return AcceptVerdict::kRefuseMaxConnections;
  }
  return AcceptVerdict::kKeep;
}

AcceptGuard& AcceptGuard::Instance() {
  static AcceptGuard guard;
  return guard;
}

void AcceptGuard::Configure(int64_t descriptor_limit, int64_t max_connections) {
  descriptor_limit_.store(descriptor_limit, std::memory_order_relaxed);
  max_connections_.store(max_connections, std::memory_order_relaxed);
}

void AcceptGuard::JobConnectionClosed() {
  // Never below zero: a disconnect of a connection accepted before the guard was configured.
  int64_t now = job_connections_.load(std::memory_order_relaxed);
  while (now > 0 &&
         !job_connections_.compare_exchange_weak(now, now - 1, std::memory_order_relaxed)) {
  }
}

int AcceptGuard::Filter(int listener, int fd, int* error) {
  if (fd < 0) {
    if (*error == EMFILE || *error == ENFILE || *error == ENOMEM || *error == ENOBUFS) {
      accept_exhausted_.fetch_add(1, std::memory_order_relaxed);
    }
    // libzmq 4.3's ipc listener aborts the process on EMFILE but waits on ENFILE.
    if (*error == EMFILE && IsUnixSocket(listener)) *error = ENFILE;
    return -1;
  }
  const bool job = listener == job_listener_.load(std::memory_order_relaxed);
  const int64_t limit = descriptor_limit_.load(std::memory_order_relaxed);
  // The peer's family is looked up only where the reserve could refuse it.
  const bool near_limit = limit > 0 && fd >= limit - kDescriptorReserve;
  const bool unix_peer = near_limit && !job && IsUnixSocket(fd);
  switch (DecideAccept(fd, job, unix_peer, job_connections(), max_connections(), limit)) {
    case AcceptVerdict::kKeep:
      if (job) job_connections_.fetch_add(1, std::memory_order_relaxed);
      return fd;
    case AcceptVerdict::kRefuseReserve:
      refused_reserve_.fetch_add(1, std::memory_order_relaxed);
      break;
    case AcceptVerdict::kRefuseMaxConnections:
      refused_max_.fetch_add(1, std::memory_order_relaxed);
      break;
  }
  ::close(fd);
  // Every acceptor in the process (libzmq, Boost.Asio, gRPC, civetweb) treats ECONNABORTED as
  // "this one connection is gone" and keeps listening.
  *error = ECONNABORTED;
  return -1;
}

}  // namespace torchfarm
