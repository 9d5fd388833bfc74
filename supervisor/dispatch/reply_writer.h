// Writes every answer a client gets on the job socket, and owns what answering releases.
//
// Owns: the framing of a reply (routing envelope, optional REQ delimiter, JSON header, one frame
// per output tensor), how an output travels (copied into a frame; pinned zero-copy in the
// worker's response ring when large and the ring can spare the slot; or written into the client's
// shared-memory region), the per-client quota (limits.max_queued_per_client) a request holds
// from acceptance to its answer, and each ZeroMQ client's unread replies (reply_backlog.h,
// limits.max_unread_*): a client with replies still in its pipe gets copies, never pinned slots,
// so one that stops reading holds only its own memory, and past the bound its new requests are
// refused. Every answer goes through Send, so quotas and client regions are released exactly
// once. The job socket is ZMQ_ROUTER_MANDATORY and sent to without blocking: a reply libzmq
// cannot take (the client is gone, or its pipe is at the high-water mark) is counted and logged,
// never dropped silently. One per supervisor; runs on the loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "common/protocol.h"
#include "common/status.h"
#include "ipc/slot_codec.h"
#include "supervisor/dispatch/reply_backlog.h"
#include "supervisor/intake/client_quota.h"
#include "supervisor/intake/pending_request.h"
#include "supervisor/loop/frontend_hub.h"
#include "supervisor/workers/pinned_response_ring.h"

namespace torchfarm {

// One request's share of a finished batch, as ReplyWriter::SendOutputs takes it.
struct BatchShare {
  const ipc::ResponseView* view = nullptr;
  std::vector<TensorSpec> outputs;  // the batch's output specs; dim 0 becomes the request's
  // The model's output names (config "outputs"); OUTPUT__k beyond them. Null: all OUTPUT__k.
  const std::vector<std::string>* output_names = nullptr;
  int64_t first_row = 0;
  bool batched = false;           // the batch held more than this request
  bool outputs_in_place = false;  // the worker wrote them into the request's output_shm itself
  PinnedResponseRing* ring = nullptr;
  bool may_pin = false;           // the ring can spare the slot for zero-copy frames
  int worker_id = -1;
  StageTimes timing;
};

class ReplyWriter {
 public:
  // Outputs this long or longer are sent zero-copy when the ring allows: below it a copy is
  // cheaper than libzmq's separate content block and the slot held until the frame is on the
  // wire (bench/analysis.md, "Zero-copy replies").
  static constexpr uint64_t kZeroCopyMinBytes = 128 * 1024;

  ReplyWriter(zmq::socket_t& jobs, ClientQuota& quota) : jobs_(jobs), quota_(quota) {}

  // Replies libzmq refused since the start: the client had gone, or its pipe was full.
  struct Undeliverable {
    uint64_t gone = 0;
    uint64_t full = 0;
  };
  const Undeliverable& undeliverable() const { return undeliverable_; }
  // Called for each undeliverable reply (metrics), with "gone" or "full".
  void set_undeliverable_hook(std::function<void(const char*)> hook) {
    undeliverable_hook_ = std::move(hook);
  }
  ReplyBacklog& backlog() { return backlog_; }
  const ReplyBacklog& backlog() const { return backlog_; }
  // The loop's front-end hub (supervisor/loop/frontend_hub.h, frontend/farm_channel.h): requests
  // whose origin is HTTP or gRPC are answered through it, to the channel that sent them. Unset
  // while no front end runs.
  void set_frontend_hub(FrontendHub* hub) { frontend_ = hub; }
  // Replies begun on the job socket since the start: the loop's poller must hear of every use
  // of it (loop_poller.h SocketWatch).
  uint64_t jobs_sends() const { return jobs_sends_; }

  // Counts an accepted request against its client; RESOURCE_EXHAUSTED when the client is at
  // limits.max_queued_per_client. `per_key`: CURVE is on and clients count by public key.
  Status AcquireQuota(PendingRequest& request, zmq::message_t& header_frame, bool per_key);
  // RESOURCE_EXHAUSTED naming the limit when the ZeroMQ client of `request` has more unread
  // replies than limits.max_unread_replies_per_client or max_unread_reply_bytes_per_client.
  Status CheckUnread(const PendingRequest& request) const;
  void set_unread_limits(int64_t replies, int64_t bytes) {
    max_unread_replies_ = replies;
    max_unread_bytes_ = bytes;
  }
  // Sends one answer and releases what the request held (quota, client regions).
  void Send(PendingRequest& request, std::string header, std::vector<zmq::message_t>* frames);
  void SendError(PendingRequest& request, const Status& status);
  // Sends a typed request (request.typed, a front end's: frontend/farm_channel.h) its answer as
  // a typed reply header, no text; releases what the request held as Send does.
  void SendTyped(PendingRequest& request, ReplyHeader header, std::vector<zmq::message_t>* frames);
  // Sends `request` its rows of a finished batch. A non-OK status (its client region shrank or
  // cannot hold the outputs) means nothing was sent: the caller fails the request with it.
  Status SendOutputs(PendingRequest& request, BatchShare share);

 private:
  // SendOutputs for a front-end request with outputs in system shared memory ("outputs_shm"):
  // each placed output is copied into its region, the others travel as frames.
  Status SendPlacedOutputs(PendingRequest& request, const BatchShare& share,
                           const std::vector<std::string>& names,
                           const std::vector<std::pair<const uint8_t*, uint64_t>>& slices);
  // Lets go of what an answered request held: its quota and its client regions.
  void ReleaseHeld(PendingRequest& request);
  // The typed reply of an "ok" answer, field by field what a front end reads from MakeOkReply's
  // text (ParseReplyHeaderLean). `outputs` is the share's, moved in where nothing reads it after.
  static ReplyHeader OkReplyHeader(const PendingRequest& request, const BatchShare& share,
                                   std::vector<TensorSpec> outputs,
                                   const std::vector<std::string>& names);
  // Whether libzmq took the reply's envelope on the job socket (ROUTER_MANDATORY, no wait);
  // counts and logs it when not.
  bool SendEnvelope(PendingRequest& request);
  // The reply on the job socket: its header frame made first (ReplyBacklog::TrackedHeader, at most
  // `bound` bytes that `write` puts in place), then the envelope, the REQ delimiter, the header and
  // the data frames. Defined in reply_writer.cc, its only user.
  template <typename Write>
  void SendOnJobs(PendingRequest& request, size_t bound, const Write& write,
                  std::vector<zmq::message_t>* frames);
  // The bytes of a reply's data frames, which its client's backlog counts with the header.
  static uint64_t FrameBytes(const std::vector<zmq::message_t>* frames);
  // Hands a front-end request's reply to its channel (dropped when the channel stopped: it has
  // answered its calls itself).
  void SendToFrontend(PendingRequest& request, zmq::message_t header,
                      std::vector<zmq::message_t>* frames);
  void CountUndeliverable(const PendingRequest& request, int error);

  zmq::socket_t& jobs_;
  FrontendHub* frontend_ = nullptr;
  ClientQuota& quota_;
  std::vector<zmq::message_t> frames_;  // reused between replies
  std::vector<uint64_t> shm_offsets_;
  std::vector<std::pair<const uint8_t*, uint64_t>> slices_;  // SendOutputs', reused
  ReplyBacklog backlog_;
  int64_t max_unread_replies_ = 256;
  int64_t max_unread_bytes_ = int64_t{64} << 20;
  Undeliverable undeliverable_;
  std::function<void(const char*)> undeliverable_hook_;
  TimePoint last_undeliverable_log_{};
  uint64_t unlogged_undeliverable_ = 0;
  uint64_t jobs_sends_ = 0;
};

}  // namespace torchfarm
