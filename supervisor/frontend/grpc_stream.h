// GrpcStream: Triton's ModelStreamInfer (docs/kserve-v2.md, "Streaming"), one bidirectional
// stream of ModelInferRequest in and ModelStreamInferResponse out, non-decoupled.
//
// Owns: one response per request, written in the order the farm answers (a client matches them by
// the request's "id", as with Triton); a request that fails (bad tensors, an unknown model, the
// farm's error) gets a response with `error_message` and the stream goes on; many requests in
// flight per stream, at most kStreamWindow read and not yet answered and written: past it the
// stream stops reading, so HTTP/2's flow control holds the client back and memory stays bounded.
// Writes go one at a time (gRPC allows one outstanding write). The stream ends OK once the client
// half-closed and every response is written, or with `Close`'s status (the server stopping).
//
// Thread rules: gRPC's reactions (OnReadDone, OnWriteDone, OnDone) run on gRPC's threads, farm
// replies on the FarmChannels' threads; state is under one mutex, and gRPC is never called while
// holding it. The stream keeps itself alive (a shared_ptr to itself) until OnDone; farm replies
// still on their way hold it too and find it closed.
#pragma once

#include <grpcpp/grpcpp.h>

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "proto/grpc_service.grpc.pb.h"
#include "supervisor/frontend/farm_channel.h"
#include "supervisor/frontend/frontend_stats.h"

namespace torchfarm {

inline constexpr int kStreamWindow = 256;

class GrpcStream : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                                  inference::ModelStreamInferResponse>,
                   public std::enable_shared_from_this<GrpcStream> {
 public:
  using Response = inference::ModelStreamInferResponse;
  // Whom the stream's requests count as: `tag` (frontend_tag.h, the peer's or the one
  // frontend.client_id_header names), or, when the stream's metadata named the client wrongly,
  // `refused`, which every request on the stream is answered with.
  struct Client {
    std::string tag;
    Status refused;
  };
  // `next_channel` picks the FarmChannel of each request; `on_done` runs once, from OnDone.
  // `system_shared_memory`: frontend.system_shared_memory (requests may name registered regions
  // when the peer is on loopback).
  GrpcStream(std::function<FarmChannel*()> next_channel, FrontendStats* stats, std::string peer,
             Client client, std::function<void(GrpcStream*)> on_done,
             bool system_shared_memory = false);

  // Starts reading (call once, after the stream is held by a shared_ptr).
  void Start();
  // Ends the stream with `status` now (after the write in progress, if any); later replies are
  // dropped.
  void Close(const grpc::Status& status);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // One request read: converted and sent to the farm, or answered with its error at once.
  void Handle(const inference::ModelInferRequest& request);
  // Queues `response` for writing; `code` and the times are for FrontendStats.
  void Answer(Response response, StatusCode code, int64_t received_us, int64_t farm_us);
  // With the lock held: what to do next (start a read, a write, or the finish).
  struct Next {
    bool read = false;
    const Response* write = nullptr;
    bool finish = false;
    grpc::Status status;
  };
  Next NextLocked();
  void Act(const Next& next);

  const std::function<FarmChannel*()> next_channel_;
  FrontendStats* const stats_;
  const std::string peer_;
  const Client client_;  // the tag of its requests, or why each is refused
  const bool system_shared_memory_;
  const std::function<void(GrpcStream*)> on_done_;
  std::shared_ptr<GrpcStream> self_;
  inference::ModelInferRequest request_;  // the buffer of the read in progress

  std::mutex mutex_;
  int inflight_ = 0;             // read and not yet written
  bool reading_ = false;         // a read is in progress
  bool half_closed_ = false;     // the client sent its last request
  bool writing_ = false;         // a write is in progress
  std::deque<Response> writes_;  // front: the write in progress
  bool closing_ = false;         // finish with close_status_ as soon as no write is in progress
  grpc::Status close_status_;
  bool finished_ = false;  // Finish was called
};

}  // namespace torchfarm
