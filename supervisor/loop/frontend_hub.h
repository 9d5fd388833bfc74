// FrontendHub: where the front ends' threads (HTTP, gRPC: supervisor/frontend/farm_channel.h) and
// the supervisor's loop hand each other messages, inside the supervisor's process.
//
// Owns: one mailbox of requests that every front-end channel pushes into and the loop alone
// takes from, and the table of the channels' reply mailboxes, which the loop pushes into and
// each channel takes from. Tensors and headers travel as the wire protocol's frames
// (zmq::message_t, moved, never copied); farm_channel.h gives the frames. A request's first frame
// is its channel's identity (Attach), which the loop keeps with the request
// (PendingRequest::identity) and names again in Reply.
//
// Why not an inproc:// ZeroMQ socket (what this replaced; issue 36): a ROUTER/DEALER pair costs
// ~13.6k instructions a request (a frame-by-frame send and receive on both sides, ZMQ_EVENTS
// questions, the sockets' command pipes), a locked queue and an eventfd ~1k.
//
// A Mailbox's descriptor is an eventfd that is readable exactly while the mailbox holds a
// message: the push that makes it non-empty raises it and the take that empties it lowers it,
// both under the mailbox's lock. So a level-triggered reader (the loop's ::poll) may take some
// messages and leave the rest for the next wake-up. An edge-triggered one (asio's epoll reactor)
// must empty the mailbox before it waits again: only a push into the empty mailbox makes an edge.
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

namespace torchfarm {

// A reply: [header][data...].
using FrontendMessage = std::vector<zmq::message_t>;

// A request: what the channel sends and the call id the loop answers it by. The tag and the id
// travel as fields, not frames: the loop reads them without parsing (farm_channel.h).
struct FrontendRequest {
  uint64_t call_id = 0;
  std::string tag;         // frontend_tag.h, or kMetaTag
  bool typed = false;      // frames[1] is a typed RequestHeader (typed_frame.h), not JSON text
  FrontendMessage frames;  // [identity][header][data...]
};

// The eventfd of a Mailbox, readable while it holds something (the header comment).
class MailboxSignal {
 public:
  // Throws std::system_error when no eventfd can be made (the process is out of descriptors).
  MailboxSignal();
  ~MailboxSignal();
  MailboxSignal(const MailboxSignal&) = delete;
  MailboxSignal& operator=(const MailboxSignal&) = delete;
  int fd() const { return fd_; }
  void Raise();
  void Lower();

 private:
  int fd_ = -1;
};

template <typename T>
class Mailbox {
 public:
  // Readable (POLLIN) while the mailbox holds something. Owned by the mailbox.
  int fd() const { return signal_.fd(); }
  // Any thread. Never blocks and never refuses: the front ends bound what they send (their
  // connection and call limits), as the unbounded inproc pipe's high-water mark of 0 did.
  void Push(T item) {
    std::lock_guard<std::mutex> lock(mutex_);
    items_.push_back(std::move(item));
    if (items_.size() == 1) signal_.Raise();
  }
  // Any thread: moves the oldest item into *out; false when there is none.
  bool Pop(T* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (items_.empty()) return false;
    *out = std::move(items_.front());
    items_.pop_front();
    if (items_.empty()) signal_.Lower();
    return true;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return items_.size();
  }

 private:
  MailboxSignal signal_;
  mutable std::mutex mutex_;  // held across Raise and Lower: the level follows items_ exactly
  std::deque<T> items_;
};

// A channel's replies.
using FrontendMailbox = Mailbox<FrontendMessage>;

class FrontendHub {
 public:
  // The mailbox the loop reads requests from.
  Mailbox<FrontendRequest>& requests() { return requests_; }

  // A channel's reply mailbox joins: returns the identity its requests carry as their first
  // frame. The mailbox must outlive its Detach.
  zmq::message_t Attach(FrontendMailbox* replies);
  // After Detach returns, no Reply reaches the mailbox again (one in progress has finished).
  void Detach(const zmq::message_t& identity);
  // Hands `message` (a reply's frames: [header][data...]) to the channel `identity` names. False,
  // the message dropped, when no such channel is attached (it stopped; its calls were failed).
  bool Reply(const zmq::message_t& identity, FrontendMessage message);

 private:
  Mailbox<FrontendRequest> requests_;
  std::mutex mutex_;
  uint32_t next_channel_ = 1;
  std::unordered_map<uint32_t, FrontendMailbox*> channels_;
};

}  // namespace torchfarm
