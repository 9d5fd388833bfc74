// The ZAP handler (ZeroMQ RFC 27) that decides which CURVE clients the supervisor serves.
//
// Owns: the REP socket bound on inproc://zeromq.zap.01 of the supervisor's context and the set of
// admitted client public keys, read from authorized_clients_dir (*.key files, one Z85 key each).
// libzmq's I/O thread sends one request per CURVE handshake on any socket of that context; this
// class answers 200 with the key as User-Id when the key is listed, 400 otherwise. Sockets without
// a security mechanism (the workers' control socket, the ipc admin socket) never ask.
//
// Runs on the supervisor's loop thread: its socket is one more item of the loop's poll. A
// handshake costs a set lookup, the key set needs no lock, and a SIGHUP reload is a plain swap
// between two polls, so a thread of its own would buy nothing but synchronization.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <zmq.hpp>

#include "common/config.h"
#include "common/status.h"

namespace torchfarm {

inline constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

class CurveAuthenticator {
 public:
  CurveAuthenticator() = default;
  CurveAuthenticator(const CurveAuthenticator&) = delete;
  CurveAuthenticator& operator=(const CurveAuthenticator&) = delete;

  // Reads the keys and binds the ZAP socket. Must run before any CURVE socket binds: without a
  // ZAP handler libzmq would admit every client that completes the handshake.
  Status Start(zmq::context_t& context, const CurveConfig& config);
  // Rereads authorized_clients_dir (SIGHUP). On error the previous set stays in force.
  Status Reload();
  // Answers every ZAP request waiting on the socket.
  void HandleRequests();
  // Makes `socket` a CURVE server with the supervisor's key; ZAP `domain` names it in logs.
  void ConfigureServer(zmq::socket_t& socket, const std::string& domain) const;

  bool started() const { return socket_.has_value(); }
  void* socket_handle() { return socket_ ? static_cast<void*>(*socket_) : nullptr; }
  size_t authorized_count() const { return authorized_.size(); }
  uint64_t refused() const { return refused_; }

 private:
  void Answer(const std::vector<zmq::message_t>& request);

  CurveConfig config_;
  std::string public_key_;
  std::string secret_key_;
  std::set<std::string> authorized_;  // Z85 public keys
  std::optional<zmq::socket_t> socket_;
  uint64_t refused_ = 0;
};

}  // namespace torchfarm
