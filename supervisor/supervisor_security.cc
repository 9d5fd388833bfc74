// Supervisor, the security set-up (docs/security.md): CURVE and the ZAP handler on the job socket
// (and on a loopback TCP admin socket), the ipc socket's group and the per-client quota.
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "supervisor/supervisor.h"

namespace torchfarm {

namespace {

std::string IpcPath(const std::string& endpoint) {
  return endpoint.rfind("ipc://", 0) == 0 ? endpoint.substr(6) : "";
}

}  // namespace

Status Supervisor::SecureSockets() {
  quota_.set_max_per_client(config_.limits.max_queued_per_client);
  replies_.set_unread_limits(config_.limits.max_unread_replies_per_client,
                             config_.limits.max_unread_reply_bytes_per_client);
  // A frame larger than any request may be is refused by libzmq before it is buffered (the peer
  // is disconnected); ParseJob gives the clear error for requests whose frames add up to more.
  jobs_.set(zmq::sockopt::maxmsgsize,
            static_cast<int64_t>(config_.limits.request.max_request_bytes));
  admin_.set(zmq::sockopt::maxmsgsize, int64_t{1} << 20);
  if (config_.curve.enabled()) {
    // The ZAP handler binds first: a CURVE socket with no handler admits every client.
    if (Status s = curve_.Start(context_, config_.curve); !s.ok()) return s;
    curve_.ConfigureServer(jobs_, "jobs");
    if (config_.admin_endpoint.rfind("tcp://", 0) == 0) curve_.ConfigureServer(admin_, "admin");
  } else if (!IsLocalEndpoint(config_.endpoint)) {
    TF_LOG(kWarn) << "INSECURE: the job endpoint is reachable from the network and \"curve\" is "
                     "not configured; any host that reaches it may run models (\"insecure\": true)"
                  << Kv("endpoint", config_.endpoint);
  }
  return Status::Ok();
}

Status Supervisor::ApplyIpcGroup() {
  if (config_.ipc_group.empty()) return Status::Ok();
  const std::string path = IpcPath(config_.endpoint);
  std::vector<char> buffer(16384);
  group entry{};
  group* found = nullptr;
  int rc = ::getgrnam_r(config_.ipc_group.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (rc != 0 || !found) {
    return NotFound("config.ipc_group: no group named '" + config_.ipc_group + "'");
  }
  if (::chown(path.c_str(), static_cast<uid_t>(-1), found->gr_gid) != 0 ||
      ::chmod(path.c_str(), 0660) != 0) {
    return Internal("cannot give '" + path + "' to group '" + config_.ipc_group +
                    "' with mode 0660: " + std::strerror(errno) +
                    " (the supervisor's user must be a member of that group)");
  }
  ipc_gid_ = static_cast<int>(found->gr_gid);
  TF_LOG(kInfo) << "job socket opened to a group" << Kv("path", path)
                << Kv("group", config_.ipc_group) << Kv("mode", "0660");
  return Status::Ok();
}

}  // namespace torchfarm
