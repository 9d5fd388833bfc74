// Small ZeroMQ helpers shared by the supervisor's socket handlers (loop thread only).
#pragma once

#include <vector>

#include <zmq.hpp>

namespace torchfarm {

// Messages read from one socket per loop turn, so doorbells and signals are never starved.
inline constexpr int kMaxMessagesPerTurn = 256;

// Reads one whole multipart message without blocking for its first frame; false when none waits.
inline bool ReceiveMultipart(zmq::socket_t& socket, std::vector<zmq::message_t>* frames) {
  frames->clear();
  while (true) {
    zmq::message_t part;
    auto got = socket.recv(part, frames->empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
    if (!got) return false;
    bool more = part.more();
    frames->push_back(std::move(part));
    if (!more) return true;
  }
}

// As ReceiveMultipart, but keeps at most `max_frames` frames of a message: the rest is read and
// dropped, and *truncated says so. A client cannot make the loop hold a million-frame vector.
inline bool ReceiveMultipartBounded(zmq::socket_t& socket, std::vector<zmq::message_t>* frames,
                                    size_t max_frames, bool* truncated) {
  frames->clear();
  *truncated = false;
  while (true) {
    const auto flags =
        frames->empty() && !*truncated ? zmq::recv_flags::dontwait : zmq::recv_flags::none;
    if (frames->size() < max_frames) {
      // Received in place: a frame received elsewhere and moved in costs a message
      // initialised, moved and closed twice over (~100 instructions a frame; issue 36).
      zmq::message_t& part = frames->emplace_back();
      if (!socket.recv(part, flags)) {
        frames->pop_back();
        return false;
      }
      if (!part.more()) return true;
    } else {
      zmq::message_t dropped;
      if (!socket.recv(dropped, flags)) return false;
      *truncated = true;
      if (!dropped.more()) return true;
    }
  }
}

}  // namespace torchfarm
