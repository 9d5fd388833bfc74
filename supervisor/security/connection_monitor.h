// Connections of the job socket, counted through a ZeroMQ socket monitor on its ROUTER
// (ZMQ_EVENT_LISTENING / ACCEPTED / DISCONNECTED / ACCEPT_FAILED on an inproc PAIR the loop
// polls). The AcceptGuard (accept_guard.h) refuses a connection beyond max_connections as it is
// accepted; this monitor tells the guard which descriptor is the job socket's listener and when a
// served connection ends, counts what libzmq reports, and logs refusals at most once per
// kLogInterval. Where accepts are not guarded (a binary without the interposer) it refuses itself:
// a connection accepted beyond max_connections is shut down, and libzmq closes it.
//
// Owns: the monitor's PAIR socket (the monitor itself ends with the job socket). Loop thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "supervisor/security/accept_guard.h"

namespace torchfarm {

class ConnectionMonitor {
 public:
  static constexpr Millis kLogInterval{10'000};
  // Events read per loop turn, so a connection storm cannot starve the other duties.
  static constexpr int kMaxEventsPerTurn = 4096;

  explicit ConnectionMonitor(AcceptGuard& guard) : guard_(guard) {}

  // Before `jobs` binds: starts its monitor on inproc://`name` and connects the reader.
  Status Start(zmq::context_t& context, zmq::socket_t& jobs, const std::string& name);
  // For the poll set (null before Start).
  void* socket_handle() { return reader_ ? static_cast<void*>(*reader_) : nullptr; }
  // Reads the events waiting.
  void HandleEvents();
  // Logs refusals since the last line, at most once per kLogInterval.
  void Report(TimePoint now);

  // Connections libzmq accepted and has not reported closed.
  int64_t open() const { return open_; }
  uint64_t accepted() const { return accepted_; }
  uint64_t accept_failed() const { return accept_failed_; }
  // Refused: by the guard (max_connections) plus those this monitor shut down itself.
  uint64_t refused() const { return guard_.refused_max_connections() + shut_down_; }

 private:
  void OnEvent(uint16_t event, uint32_t value);

  AcceptGuard& guard_;
  std::optional<zmq::socket_t> reader_;
  int64_t open_ = 0;
  uint64_t accepted_ = 0;
  uint64_t accept_failed_ = 0;
  uint64_t shut_down_ = 0;
  uint64_t refused_logged_ = 0;
  uint64_t reserve_logged_ = 0;
  TimePoint last_log_{};
};

}  // namespace torchfarm
