// For the front ends' fake loops (fake_farm_loop.h, grpc_server_fixture.h, farm_channel_test):
// the loop's side of a FrontendHub (supervisor/loop/frontend_hub.h) as a test drives it, in the
// ROUTER's terms the fakes were written in: a request is [identity][tag][call id][header][data...]
// and a reply [identity][header][data...].
#pragma once

#include <poll.h>

#include <chrono>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "supervisor/loop/frontend_hub.h"

namespace torchfarm::testing {

// Waits up to `timeout` for a channel's request and moves it into *frames; false on timeout.
inline bool ReceiveFromHub(FrontendHub& hub, std::vector<zmq::message_t>* frames,
                           std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!hub.requests().Pop(frames)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd item{hub.requests().fd(), POLLIN, 0};
    ::poll(&item, 1, static_cast<int>(left.count()));
  }
  return true;
}

// Hands `reply` ([identity][header][data...]) to the channel its identity names; false when that
// channel has stopped.
inline bool ReplyThroughHub(FrontendHub& hub, std::vector<zmq::message_t> reply) {
  if (reply.empty()) return false;
  const zmq::message_t identity = std::move(reply[0]);
  reply.erase(reply.begin());
  return hub.Reply(identity, std::move(reply));
}

}  // namespace torchfarm::testing
