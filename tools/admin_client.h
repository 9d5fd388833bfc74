// A one-shot client of the supervisor's admin socket: one JSON command in, one JSON reply out.
//
// Owns: a ZeroMQ context and, during each Call, one REQ socket (linger 0) connected to the
// admin endpoint. Each Call uses a fresh socket, so a timed-out call leaves nothing behind that
// could mistake its late reply for the next call's. Runs in the CLI process (stats, top, ctl),
// on its main thread; not thread-safe.
//
// The admin protocol (JSON objects, one frame each way) is documented in docs/operations.md.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace zmq {
class context_t;
}  // namespace zmq

namespace torchfarm {

// Where `torchfarm stats|top|ctl` look when --admin is not given: the default run_dir's socket.
inline constexpr const char* kDefaultAdminEndpoint = "ipc:///tmp/torchfarm/admin.sock";
inline constexpr int kDefaultAdminTimeoutMs = 2000;
// --timeout-ms of stats, top and ctl: 1 ms .. one hour.
inline constexpr int kMaxAdminTimeoutMs = 3'600'000;

class AdminClient {
 public:
  explicit AdminClient(std::string endpoint, int timeout_ms = kDefaultAdminTimeoutMs);
  ~AdminClient();
  AdminClient(const AdminClient&) = delete;
  AdminClient& operator=(const AdminClient&) = delete;

  // Sends `request` and waits up to timeout_ms for the reply object.
  //   OK: *reply holds the parsed object (which may itself say {"ok": false, "error": …}).
  //   UNAVAILABLE: no answer in time, or the ipc socket file is missing ("no answer from
  //     ipc://… within 2000 ms; is the supervisor running?").
  //   INVALID_ARGUMENT: a malformed endpoint.
  //   INTERNAL: the reply is not a JSON object.
  Status Call(const nlohmann::json& request, nlohmann::json* reply);
  // Call({"cmd": cmd}).
  Status Command(const std::string& cmd, nlohmann::json* reply);

  const std::string& endpoint() const { return endpoint_; }
  int timeout_ms() const { return timeout_ms_; }

 private:
  // For ipc:// endpoints: a missing socket file or one we may not write explains a timeout
  // better than the timeout does. Empty when nothing is wrong that can be seen from here.
  std::string IpcProblem() const;

  std::string endpoint_;
  int timeout_ms_;
  std::unique_ptr<zmq::context_t> context_;
};

// The error reply of an admin command ("ok": false or an "error" key), or "" for success.
std::string AdminReplyError(const nlohmann::json& reply);

}  // namespace torchfarm
