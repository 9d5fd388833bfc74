// For the front ends' fake loops (fake_farm_loop.h, grpc_server_fixture.h, farm_channel_test)
// and tests that play a channel (supervisor_turn_test): a FrontendHub (supervisor/loop/
// frontend_hub.h) in the multipart terms the fakes were written in. A request is
// [identity][tag][call id][header][data...], the call id in decimal and a typed request's tag
// prefixed with kTypedTagPrefix; a reply is [identity][header][data...].
#pragma once

#include <poll.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "supervisor/loop/frontend_hub.h"

namespace torchfarm::testing {

// Marks a typed request's tag in the multipart form: "typed http <peer>".
inline constexpr const char* kTypedTagPrefix = "typed ";

// `request` as [identity][tag][call id][header][data...].
inline std::vector<zmq::message_t> AsFrames(FrontendRequest request) {
  std::vector<zmq::message_t> frames;
  if (request.frames.empty()) return frames;
  frames.push_back(std::move(request.frames[0]));
  frames.emplace_back((request.typed ? std::string(kTypedTagPrefix) : std::string()) + request.tag);
  frames.emplace_back(std::to_string(request.call_id));
  for (size_t i = 1; i < request.frames.size(); ++i) frames.push_back(std::move(request.frames[i]));
  return frames;
}

// [tag][call id][header][data...] from a channel whose identity is `identity`, as a request.
inline FrontendRequest FromFrames(const zmq::message_t& identity,
                                  std::vector<zmq::message_t> frames) {
  FrontendRequest request;
  request.frames.emplace_back(identity.data(), identity.size());
  if (frames.size() < 2) return request;
  request.tag = frames[0].to_string();
  const std::string prefix = kTypedTagPrefix;
  request.typed = request.tag.compare(0, prefix.size(), prefix) == 0;
  if (request.typed) request.tag = request.tag.substr(prefix.size());
  request.call_id = std::stoull(frames[1].to_string());
  for (size_t i = 2; i < frames.size(); ++i) request.frames.push_back(std::move(frames[i]));
  return request;
}

// Waits up to `timeout` for a channel's request and moves it into *frames; false on timeout.
inline bool ReceiveFromHub(FrontendHub& hub, std::vector<zmq::message_t>* frames,
                           std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  FrontendRequest request;
  while (!hub.requests().Pop(&request)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd item{hub.requests().fd(), POLLIN, 0};
    ::poll(&item, 1, static_cast<int>(left.count()));
  }
  *frames = AsFrames(std::move(request));
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
