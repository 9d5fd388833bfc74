// Per-client admission: how many requests one client may have queued or running at once, so one
// noisy client cannot take a whole model queue (config "limits.max_queued_per_client").
//
// Owns: a count per client key. An entry that drops to zero is kept (a client at c=1 takes and
// gives back its one request every reply: erasing and re-making its entry cost two allocations a
// request, issue 36) until more than kIdleKept are idle; then every idle entry is erased at once.
// The map holds at most the supervisor's request count plus kIdleKept entries. A client key is the
// ROUTER routing id of the connection, or the CURVE public key (ZAP User-Id) when the job socket
// runs CURVE, so that one key is one client however many connections it opens; a v2 front end's
// request counts under its frontend.client_id_header value, else its connection
// (supervisor/frontend/frontend_tag.h). Pure; runs on the supervisor's loop thread.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <zmq.hpp>

namespace torchfarm {

class ClientQuota {
 public:
  explicit ClientQuota(int64_t max_per_client = 256) : max_per_client_(max_per_client) {}

  // Counts one more request of `client`; false (nothing counted) when it already holds the max.
  bool TryAcquire(const std::string& client);
  // The request of `client` was answered.
  void Release(const std::string& client);

  int64_t held(const std::string& client) const;
  // Clients holding at least one request.
  size_t clients() const { return held_.size() - idle_; }
  // Entries in the map, idle ones included (tests: at most clients() + kIdleKept).
  size_t entries() const { return held_.size(); }
  static constexpr size_t kIdleKept = 64;
  int64_t max_per_client() const { return max_per_client_; }
  void set_max_per_client(int64_t max) { max_per_client_ = max; }

 private:
  int64_t max_per_client_;
  std::unordered_map<std::string, int64_t> held_;
  size_t idle_ = 0;  // entries at zero
};

// The key a request is counted under: the ZAP User-Id when `per_key` and the message carries one
// (CURVE), else the routing id. `payload` is any frame of the request after the
// envelope (libzmq attaches the connection's metadata to received frames).
std::string ClientKey(const zmq::message_t& identity, zmq::message_t& payload, bool per_key);

}  // namespace torchfarm
