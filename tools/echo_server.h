// `torchfarm bench --echo-server EP`: a trivial target for the load generator. It binds a ROUTER
// like the supervisor's job socket and answers every request with a protocol-shaped ok reply whose
// outputs are the request's own tensor frames, sent back without a copy. The generator's code path
// is then exactly the one it takes against a farm, so echo figures measure the generator plus
// ZeroMQ over the same transport, and nothing of the farm.
//
// Owns: a ZeroMQ context (one I/O thread), the ROUTER socket and a signalfd for SIGINT/SIGTERM
// (blocked in the calling thread). One thread, one poll loop, like the supervisor.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace torchfarm {

struct EchoStats {
  uint64_t requests = 0;
  uint64_t fallbacks = 0;  // headers the fast scan could not read (answered via a full parse)
};

// Serves until SIGINT or SIGTERM; prints "echo server ready on EP" on stdout once bound.
Status RunEchoServer(const std::string& endpoint, EchoStats* stats);

}  // namespace torchfarm
