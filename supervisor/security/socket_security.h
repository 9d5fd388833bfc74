// The job and admin sockets' security at start (docs/security.md): the largest frame libzmq
// accepts, CURVE with its ZAP handler on the job socket (and on a TCP admin socket), the warning
// for a network endpoint without CURVE, and the ipc socket file's group (config ipc_group).
// Free functions; called once from Supervisor::Start, before the sockets accept anyone.
#pragma once

#include <zmq.hpp>

#include "common/config.h"
#include "common/status.h"
#include "supervisor/security/curve_authenticator.h"

namespace torchfarm {

// Before bind: maxmsgsize of both sockets, and CURVE (the ZAP handler first) when configured.
Status SecureSockets(const FarmConfig& config, zmq::context_t& context, zmq::socket_t& jobs,
                     zmq::socket_t& admin, CurveAuthenticator& curve);
// After bind: the job socket's file to group `config.ipc_group` with mode 0660; its gid in `gid`
// (unchanged when no group is configured).
Status ApplyIpcGroup(const FarmConfig& config, int* gid);

}  // namespace torchfarm
