// FarmChannel: how a front-end thread talks to the supervisor's job loop.
//
// The HTTP and gRPC front ends (docs/kserve-v2.md) run on threads of the supervisor process, never
// on its poll loop. Each FarmChannel is one such thread: it runs a Boost.Asio io_context and
// pushes its requests into the loop's FrontendHub (supervisor/loop/frontend_hub.h: a locked queue
// whose eventfd the loop polls beside the job socket); the loop pushes each answer into the
// channel's own reply mailbox, whose eventfd the io_context watches, so one thread serves both
// its HTTP connections and its farm replies. A front-end request is an ordinary job to the loop:
// the same intake checks, batching, quotas and replies as the ZeroMQ path, with no process hop
// and no socket between them.
//
// Requests into the hub's request mailbox (channel -> loop) are FrontendRequests
// (frontend_hub.h): a call id, a tag, whether the header is typed, and the frames
//   [identity][header][data frames...]             a JSON request, or a "meta" query
//   [identity][typed header][data frames...]       a typed request (issue 36)
// where
//   call id the call's id N: the loop answers every request with it (JobAcceptor::ReadFrontend),
//           also one whose header it cannot read (over limits.max_header_bytes, not JSON, a
//           typed frame that is not one), so no error reply is ever uncorrelated.
//   tag     the protocol (metrics label) and the client key that limits.max_queued_per_client,
//           client_weights and fair queueing count by (frontend_tag.h owns the format):
//           "http <peer>" / "grpc <peer>", one client per connection, or "http=<id>" /
//           "grpc=<id>" when frontend.client_id_header named the client <id>; or "meta": a
//           metadata/health query.
//   identity the channel's, from FrontendHub::Attach: the loop's replies name it.
//   header  a wire-protocol request header (docs/protocol.md), "id" set by the channel to N too;
//           for "meta": {"id": N} or {"id": N, "model": NAME}.
//   typed header
//           a common/protocol.h RequestHeader in a typed frame (typed_frame.h): the frame owns
//           it and frees it however the message ends (read, or dropped at shutdown). Its "id" is
//           unset: the call id is the reply's correlation. Built by ToRequestHeader
//           (v2_inference.h), so the loop reads no JSON; the loop checks it as it checks a parsed
//           header (common/request_header_check.h) and then exactly as any other request.
//   data    one frame per input not in shared memory, in the header's order.
// Replies (loop -> the channel's reply mailbox), one per message:
//   [header][data frames...]        to a JSON request or query: exactly as the job socket's
//                                   replies, with "id": N
//   [typed reply][data frames...]   to a typed request: a common/protocol.h ReplyHeader in a
//                                   typed frame, id N, fields as ParseReplyHeaderLean would read
//                                   them from the text reply (ReplyWriter::SendTyped); an
//                                   error's message gets invalid UTF-8 replaced here, as the
//                                   text reply's JSON would have it
// DrainReplies tells the two apart by the first frame (typed_frame.h). A
// "meta" reply is {"id": N, "status": "ok", "live": true, "ready": bool, "draining": bool,
// "models": [ModelMetadataJson...]} (supervisor/dispatch/model_metadata.h); its FarmReply has the
// whole object in header.raw and no outputs.
//
// Thread rules: Call may be used from the channel's own thread (HTTP sessions on its io_context);
// Post hands work to that thread from any other (gRPC's threads). `done` always runs on the
// channel's thread, exactly once per Call, also when the channel stops (UNAVAILABLE).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/protocol.h"
#include "common/status.h"
#include "supervisor/frontend/frontend_endpoint.h"
#include "supervisor/loop/frontend_hub.h"

namespace torchfarm {

// One answer from the loop. `status` is not OK when the farm answered with an error or when the
// channel could not deliver the request; `header` is the reply's parsed header (empty on a channel
// failure), `frames` its data frames (one per output).
struct FarmReply {
  Status status;
  ReplyHeader header;
  std::vector<zmq::message_t> frames;
};

class FarmChannel {
 public:
  using Done = std::function<void(FarmReply)>;

  // Talks to the loop through `hub`, which must outlive the channel; Start attaches and runs the
  // thread.
  explicit FarmChannel(FrontendHub& hub);
  ~FarmChannel();  // Stop()
  FarmChannel(const FarmChannel&) = delete;
  FarmChannel& operator=(const FarmChannel&) = delete;

  Status Start();
  // Ends the thread; calls still waiting get UNAVAILABLE ("the supervisor is shutting down").
  void Stop();

  boost::asio::io_context& io() { return io_; }

  // On the channel's thread. `header` is a request header without "id" (the channel sets it);
  // `frames` are its data frames. `tag` is a frontend_tag.h tag or kMetaTag. A request
  // header over request_limits().max_header_bytes is answered INVALID_ARGUMENT at once, unsent.
  void Call(const std::string& tag, nlohmann::json header, std::vector<zmq::message_t> frames,
            Done done);
  // On the channel's thread: a typed inference request (ToRequestHeader built `header` and
  // `frames`, and checked its size), handed to the loop without JSON. `tag` as above, never
  // kMetaTag.
  void Call(const std::string& tag, RequestHeader header, std::vector<zmq::message_t> frames,
            Done done);
  // From any thread: runs `work` on the channel's thread.
  void Post(std::function<void()> work);

  // The loop's limits.request that a front end checks a request against before Call, so that
  // it is refused at once with a message in its own protocol's terms; the loop checks again.
  // Any thread; the supervisor sets them at start and on a reload.
  void set_request_limits(const RequestLimits& limits);
  RequestLimits request_limits() const;

  // Calls sent and not yet answered (for tests and stats).
  size_t pending() const { return pending_count_.load(std::memory_order_relaxed); }
  // Replies that matched no waiting call (logged as errors; stats "unmatched_replies"). Only a
  // loop bug makes one: a test that ends with this non-zero has found a dropped answer.
  uint64_t unmatched_replies() const { return unmatched_.load(std::memory_order_relaxed); }

 private:
  // Pushes a FrontendRequest (frames [identity][header][frames...]) and waits for the reply to
  // its call id.
  void Send(const std::string& tag, bool typed, zmq::message_t header,
            std::vector<zmq::message_t> frames, Done done);
  void WatchReplies();
  void DrainReplies();
  void FailAll(const Status& status);

  FrontendHub& hub_;
  std::unique_ptr<FrontendMailbox> replies_;
  zmq::message_t identity_;  // from hub_.Attach; empty until Start
  // Run by this channel's thread alone (hint 1): work posted from that thread skips the shared
  // queue's lock and the wake-up of other runners; posting from any thread stays safe.
  boost::asio::io_context io_{1};
  std::unique_ptr<boost::asio::posix::stream_descriptor> replies_fd_;

  std::thread thread_;
  uint64_t next_id_ = 1;
  struct Waiting {
    Done done;
    bool meta = false;  // a kMetaTag query: its reply is a JSON object without tensors
  };
  std::unordered_map<uint64_t, Waiting> waiting_;
  std::atomic<size_t> pending_count_{0};
  std::atomic<uint64_t> unmatched_{0};
  std::atomic<uint64_t> max_header_bytes_{kMaxHeaderBytes};
  std::atomic<uint64_t> max_inputs_{kMaxInputs};
  std::atomic<bool> stopping_{false};
};

}  // namespace torchfarm
