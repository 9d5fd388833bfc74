#include "supervisor/security/socket_security.h"

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/log.h"

namespace torchfarm {

namespace {

std::string IpcPath(const std::string& endpoint) {
  return endpoint.rfind("ipc://", 0) == 0 ? endpoint.substr(6) : "";
}

}  // namespace

Status SecureSockets(const FarmConfig& config, zmq::context_t& context, zmq::socket_t& jobs,
                     zmq::socket_t& admin, CurveAuthenticator& curve) {
  // A frame larger than any request may be is refused by libzmq before it is buffered (the peer
  // is disconnected); ParseJob gives the clear error for requests whose frames add up to more.
  jobs.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(config.limits.request.max_request_bytes));
  admin.set(zmq::sockopt::maxmsgsize, int64_t{1} << 20);
  if (config.curve.enabled()) {
    // The ZAP handler binds first: a CURVE socket with no handler admits every client.
    if (Status s = curve.Start(context, config.curve); !s.ok()) return s;
    curve.ConfigureServer(jobs, "jobs");
    if (config.admin_endpoint.rfind("tcp://", 0) == 0) curve.ConfigureServer(admin, "admin");
  } else if (!IsLocalEndpoint(config.endpoint)) {
    TF_LOG(kWarn) << "INSECURE: the job endpoint is reachable from the network and \"curve\" is "
                     "not configured; any host that reaches it may run models (\"insecure\": true)"
                  << Kv("endpoint", config.endpoint);
  }
  return Status::Ok();
}

Status ApplyIpcGroup(const FarmConfig& config, int* gid) {
  if (config.ipc_group.empty()) return Status::Ok();
  const std::string path = IpcPath(config.endpoint);
  std::vector<char> buffer(16384);
  group entry{};
  group* found = nullptr;
  int rc = ::getgrnam_r(config.ipc_group.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (rc != 0 || !found) {
    return NotFound("config.ipc_group: no group named '" + config.ipc_group + "'");
  }
  if (::chown(path.c_str(), static_cast<uid_t>(-1), found->gr_gid) != 0 ||
      ::chmod(path.c_str(), 0660) != 0) {
    return Internal("cannot give '" + path + "' to group '" + config.ipc_group +
                    "' with mode 0660: " + std::strerror(errno) +
                    " (the supervisor's user must be a member of that group)");
  }
  *gid = static_cast<int>(found->gr_gid);
  TF_LOG(kInfo) << "job socket opened to a group" << Kv("path", path)
                << Kv("group", config.ipc_group) << Kv("mode", "0660");
  return Status::Ok();
}

}  // namespace torchfarm
