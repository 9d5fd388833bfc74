// Every connection the supervisor process accepts passes here, in whichever thread accepted it
// (libzmq's I/O thread, the front ends' threads, the metrics exporter's), through the accept() and
// accept4() the binary interposes (accept_interposer.cc). It keeps two promises:
//
//  * The job socket serves at most max_connections clients: one more is closed as it is accepted
//    ("refused"), before libzmq ever sees it. The count of served connections goes up here and
//    down when the job socket's monitor reports a disconnect (connection_monitor.h).
//  * The last kDescriptorReserve descriptors are kept for the admin and control sockets, worker
//    launches (segments, doorbells, pipes) and client regions: a TCP connection whose descriptor
//    falls inside the reserve is closed at once, whichever listener took it.
//
// And it works around libzmq 4.3, which aborts the whole process when accept() on an ipc://
// listener fails with EMFILE (ipc_listener.cpp asserts errno is one of EAGAIN, EINTR, ECONNABORTED,
// EPROTO or ENFILE): on a Unix-domain listener EMFILE is reported as ENFILE, which libzmq treats as
// "try again later".
//
// Owns: atomics only (no locks, no allocation on the accept path), so any thread may call it.
// Configured by the supervisor's loop thread; read by it for stats and metrics.
#pragma once

#include <atomic>
#include <cstdint>

namespace torchfarm {

// Descriptors below the soft limit that TCP accepts never take.
inline constexpr int kDescriptorReserve = 32;

enum class AcceptVerdict { kKeep, kRefuseReserve, kRefuseMaxConnections };

// Pure: what to do with descriptor `fd` just accepted. `unix_peer`: the connection is Unix-domain
// (admin, control or an ipc:// job socket); the reserve never refuses those but for the job socket.
AcceptVerdict DecideAccept(int fd, bool job_listener, bool unix_peer, int64_t job_connections,
                           int64_t max_connections, int64_t descriptor_limit);

class AcceptGuard {
 public:
  // The one guard of this process.
  static AcceptGuard& Instance();

  // Loop thread: limits and the job socket's listening descriptor (from its monitor's
  // LISTENING event; -1: none yet).
  void Configure(int64_t descriptor_limit, int64_t max_connections);
  void SetJobListener(int fd) { job_listener_.store(fd, std::memory_order_relaxed); }
  void set_max_connections(int64_t n) { max_connections_.store(n, std::memory_order_relaxed); }
  // A served job connection ended (its monitor's DISCONNECTED event).
  void JobConnectionClosed();

  // Any thread, right after the real accept on `listener` returned `fd` (or -1 with `error`).
  // Returns the descriptor to hand on, or -1 with *error set for the caller's errno.
  int Filter(int listener, int fd, int* error);

  int64_t job_connections() const { return job_connections_.load(std::memory_order_relaxed); }
  int64_t max_connections() const { return max_connections_.load(std::memory_order_relaxed); }
  int64_t descriptor_limit() const { return descriptor_limit_.load(std::memory_order_relaxed); }
  uint64_t refused_max_connections() const { return refused_max_.load(std::memory_order_relaxed); }
  uint64_t refused_reserve() const { return refused_reserve_.load(std::memory_order_relaxed); }
  // accept() failures for want of descriptors or memory (EMFILE, ENFILE, ENOMEM, ENOBUFS).
  uint64_t accept_exhausted() const { return accept_exhausted_.load(std::memory_order_relaxed); }
  // Whether accept() calls reach Filter (false in binaries without the interposer).
  bool interposed() const { return interposed_.load(std::memory_order_relaxed); }
  void MarkInterposed() { interposed_.store(true, std::memory_order_relaxed); }

 private:
  std::atomic<int> job_listener_{-1};
  std::atomic<int64_t> descriptor_limit_{0};  // 0: unknown, no reserve
  std::atomic<int64_t> max_connections_{0};   // 0: no cap
  std::atomic<int64_t> job_connections_{0};
  std::atomic<uint64_t> refused_max_{0};
  std::atomic<uint64_t> refused_reserve_{0};
  std::atomic<uint64_t> accept_exhausted_{0};
  std::atomic<bool> interposed_{false};
};

}  // namespace torchfarm
