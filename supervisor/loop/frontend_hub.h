// FrontendHub: where the front ends' threads (HTTP, gRPC: supervisor/frontend/farm_channel.h) and
// the supervisor's loop hand each other messages, inside the supervisor's process.
//
// Owns: one mailbox of requests that every front-end channel pushes into and the loop alone
// takes from, and the table of the channels' reply mailboxes, which the loop pushes into and
// each channel takes from. A message is the multipart form the wire protocol has
// (std::vector<zmq::message_t>, frames moved, never copied); farm_channel.h gives its frames.
// A request's first frame is its channel's identity (Attach), which the loop keeps with the
// request (PendingRequest::identity) and names again in Reply.
//
// Why not an inproc:// ZeroMQ socket (what this replaced; issue 36): a ROUTER/DEALER pair costs
// ~13.6k instructions a request (a frame-by-frame send and receive on both sides, ZMQ_EVENTS
// questions, the sockets' command pipes), a locked queue and an eventfd ~1k.
//
// A Mailbox's descriptor is an eventfd that is readable exactly while the mailbox holds a
// message: the push that makes it non-empty raises it and the take that empties it lowers it,
// both under the mailbox's lock. So a reader may poll it level-triggered (the loop's ::poll,
// an asio wait), take some messages, and leave the rest for the next wake-up. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>


namespace torchfarm {

using FrontendMessage = std::vector<zmq::message_t>;

class FrontendMailbox {
 public:
  // Throws std::system_error when no eventfd can be made (the process is out of descriptors).
  FrontendMailbox();
  ~FrontendMailbox();
  FrontendMailbox(const FrontendMailbox&) = delete;
  FrontendMailbox& operator=(const FrontendMailbox&) = delete;

  // Readable (POLLIN) while the mailbox holds a message. Owned by the mailbox.
  int fd() const { return fd_; }
  // Any thread. Never blocks and never refuses: the front ends bound what they send (their
  // connection and call limits), as the unbounded inproc pipe's high-water mark of 0 did.
  void Push(FrontendMessage message);
  // Any thread: moves the oldest message into *out; false when there is none.
  bool Pop(FrontendMessage* out);
  size_t size() const;

 private:
  void Raise();
  void Lower();

  int fd_ = -1;
  mutable std::mutex mutex_;
  std::deque<FrontendMessage> messages_;
};

class FrontendHub {
 public:
  // The mailbox the loop reads requests from.
  FrontendMailbox& requests() { return requests_; }

  // A channel's reply mailbox joins: returns the identity its requests carry as their first
  // frame. The mailbox must outlive its Detach.
  zmq::message_t Attach(FrontendMailbox* replies);
  // After Detach returns, no Reply reaches the mailbox again (one in progress has finished).
  void Detach(const zmq::message_t& identity);
  // Hands `message` (a reply's frames: [header][data...]) to the channel `identity` names. False,
  // the message dropped, when no such channel is attached (it stopped; its calls were failed).
  bool Reply(const zmq::message_t& identity, FrontendMessage message);

 private:
  FrontendMailbox requests_;
  std::mutex mutex_;
  uint32_t next_channel_ = 1;
  std::unordered_map<uint32_t, FrontendMailbox*> channels_;
};

}  // namespace torchfarm
