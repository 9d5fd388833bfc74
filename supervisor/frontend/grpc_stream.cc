#include "supervisor/frontend/grpc_stream.h"
#include "supervisor/frontend/v2_shm_parameters.h"

#include <chrono>
#include <utility>
#include <vector>

#include "supervisor/frontend/grpc_service.h"
#include "supervisor/frontend/v2_inference.h"

namespace torchfarm {

namespace {

using StreamClock = std::chrono::steady_clock;

int64_t StreamMicrosSince(StreamClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(StreamClock::now() - start).count();
}

GrpcStream::Response StreamErrorResponse(const inference::ModelInferRequest& request,
                                         const Status& status) {
  GrpcStream::Response response;
  response.set_error_message(status.message());
  inference::ModelInferResponse* infer = response.mutable_infer_response();
  infer->set_model_name(request.model_name());
  infer->set_model_version(request.model_version());
  infer->set_id(request.id());
  return response;
}

}  // namespace

GrpcStream::GrpcStream(std::function<FarmChannel*()> next_channel, FrontendStats* stats,
                       std::string peer, Client client, std::function<void(GrpcStream*)> on_done,
                       bool system_shared_memory)
    : next_channel_(std::move(next_channel)),
      stats_(stats),
      peer_(std::move(peer)),
      client_(std::move(client)),
      system_shared_memory_(system_shared_memory),
      on_done_(std::move(on_done)) {}

void GrpcStream::Start() {
  self_ = shared_from_this();
  Next next;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    next = NextLocked();
  }
  Act(next);
}

void GrpcStream::Close(const grpc::Status& status) {
  Next next;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_ || closing_) return;
    closing_ = true;
    close_status_ = status;
    next = NextLocked();
  }
  Act(next);
}

GrpcStream::Next GrpcStream::NextLocked() {
  Next next;
  if (finished_) return next;
  if (closing_) {
    if (!writing_) {
      finished_ = true;
      next.finish = true;
      next.status = close_status_;
    }
    return next;
  }
  if (!writing_ && !writes_.empty()) {
    writing_ = true;
    next.write = &writes_.front();
  }
  if (!reading_ && !half_closed_ && inflight_ < kStreamWindow) {
    reading_ = true;
    next.read = true;
  }
  if (half_closed_ && !reading_ && inflight_ == 0 && !writing_) {
    finished_ = true;
    next.finish = true;
    next.status = grpc::Status::OK;
  }
  return next;
}

void GrpcStream::Act(const Next& next) {
  if (next.write != nullptr) StartWrite(next.write);
  if (next.read) StartRead(&request_);
  if (next.finish) Finish(next.status);
}

void GrpcStream::OnReadDone(bool ok) {
  if (ok) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++inflight_;
    }
    // reading_ stays true until the buffer is converted, so no other thread starts a read into it.
    Handle(request_);
  }
  Next next;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reading_ = false;
    if (!ok) half_closed_ = true;
    next = NextLocked();
  }
  Act(next);
}

void GrpcStream::OnWriteDone(bool ok) {
  Next next;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    writing_ = false;
    writes_.pop_front();
    --inflight_;
    if (!ok && !closing_) {
      closing_ = true;
      close_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "the stream broke while writing");
    }
    next = NextLocked();
  }
  Act(next);
}

void GrpcStream::OnCancel() {
  Close(grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the stream"));
}

void GrpcStream::OnDone() {
  std::shared_ptr<GrpcStream> keep = std::move(self_);  // this lives until the end of OnDone
  on_done_(this);
}

void GrpcStream::Answer(Response response, StatusCode code, int64_t total_us, int64_t farm_us) {
  stats_->Record(FrontendProtocol::kGrpc, code, total_us, farm_us);
  Next next;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_ || closing_) return;  // the stream ended; nobody reads this answer
    writes_.push_back(std::move(response));
    next = NextLocked();
  }
  Act(next);
}

void GrpcStream::Handle(const inference::ModelInferRequest& request) {
  const auto received = StreamClock::now();
  auto v2 = std::make_shared<V2InferRequest>();
  FarmChannel* channel = next_channel_();
  struct Payload {
    RequestHeader header;
    std::vector<zmq::message_t> frames;
  };
  auto payload = std::make_shared<Payload>();
  Status s = client_.refused;
  if (s.ok()) s = V2RequestFromProto(request, v2.get());
  if (s.ok()) s = CheckV2ShmAllowed(*v2, system_shared_memory_, peer_);
  if (s.ok()) {
    s = ToRequestHeader(*v2, channel->request_limits(), &payload->header, &payload->frames);
  }
  if (!s.ok()) {
    Answer(StreamErrorResponse(request, s), s.code(), StreamMicrosSince(received), 0);
    return;
  }
  channel->Post([self = shared_from_this(), channel, payload, v2, received, id = request.id()]() {
    const auto sent = StreamClock::now();
    channel->Call(
        self->client_.tag, std::move(payload->header), std::move(payload->frames),
        [self, v2, received, sent, id](FarmReply reply) {
          const int64_t farm_us = StreamMicrosSince(sent);
          Status status = reply.status;
          V2InferResponse v2_response;
          if (status.ok()) {
            status = FromFarmReply(*v2, reply.header, std::move(reply.frames), &v2_response);
          }
          Response response;
          if (status.ok()) {
            V2ResponseToProto(v2_response, response.mutable_infer_response());
          } else {
            inference::ModelInferRequest named;
            named.set_model_name(v2->model);
            named.set_model_version(v2->version);
            named.set_id(id);
            response = StreamErrorResponse(named, status);
          }
          self->Answer(std::move(response), status.code(), StreamMicrosSince(received), farm_us);
        });
  });
}

}  // namespace torchfarm
