#include "supervisor/events/job_acceptor.h"

#include <string_view>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/protocol.h"
#include "supervisor/events/worker_events.h"
#include "supervisor/frontend/frontend_endpoint.h"
#include "supervisor/frontend/frontend_tag.h"
#include "supervisor/frontend/typed_frame.h"
#include "supervisor/intake/job_intake.h"
#include "supervisor/zmq_util.h"

namespace torchfarm {

using nlohmann::json;

namespace {

// Empties the reused frame vector however a read ends (a throw included): what a refused or
// dropped request left in it is let go of now, and the capacity stays for the next turn.
struct ClearedOnExit {
  std::vector<zmq::message_t>& frames;
  ~ClearedOnExit() { frames.clear(); }
};

}  // namespace

bool JobAcceptor::ReadJobs(zmq::socket_t& jobs) {
  std::vector<zmq::message_t>& frames = frames_;
  const ClearedOnExit cleared{frames};
  // Envelope (identity, delimiter) + header + inputs, and one more so ParseJob sees the excess.
  const size_t max_frames = d_.limits.max_inputs + 4;
  bool truncated = false;
  for (int n = 0; n < kMaxMessagesPerTurn; ++n) {
    // False only when the first frame's non-blocking receive found nothing.
    if (!ReceiveMultipartBounded(jobs, &frames, max_frames, &truncated)) return true;
    Accept(frames);
  }
  return false;
}

void JobAcceptor::Accept(std::vector<zmq::message_t>& frames, RequestOrigin origin,
                         std::string client, const json* call_id) {
  // Made where it stays until answered: the queue and the batch take its pointer (HeldRequest).
  HeldRequest held = std::make_unique<PendingRequest>();
  PendingRequest& request = *held;
  request.origin = origin;
  request.client = std::move(client);
  size_t payload = 0;
  if (!SplitEnvelope(frames, &request, &payload)) return;
  size_t served = d_.models.served_index().size();
  ShmCommand command;
  // Front-end requests never name the job socket's token regions, only the system regions their
  // clients registered (frontend.system_shared_memory); ParseJob keeps the two apart.
  const bool front_end = origin != RequestOrigin::kZmq;
  Status s = ParseJob(
      frames, payload, d_.models.served_configs(), d_.clock.Now(), &request, &served, d_.limits,
      !front_end || system_shm_ ? client_shm_ : nullptr, &command,
      [this](size_t served) { return d_.models.ServedVersionLoaded(served); }, front_end);
  // The front end waits for this id; the header's may be missing or unreadable.
  if (call_id) request.id = *call_id;
  if (s.ok() && command.op != RequestOp::kInfer) {
    RunShmCommand(request, command, ClientKey(request.identity, frames[payload], curve_));
    return;
  }
  Admit(held, frames, payload, served, s);
}

void JobAcceptor::AcceptTyped(std::vector<zmq::message_t>& frames, RequestOrigin origin,
                              std::string client, const json& call_id) {
  HeldRequest held = std::make_unique<PendingRequest>();
  PendingRequest& request = *held;
  request.origin = origin;
  request.client = std::move(client);
  request.id = call_id;
  request.typed = true;
  request.identity = std::move(frames[0]);
  constexpr size_t kPayload = 1;  // [routing][typed header][data...]: no REQ delimiter
  size_t served = d_.models.served_index().size();
  RequestHeader* header =
      frames.size() > kPayload ? TypedFrameValue<RequestHeader>(frames[kPayload]) : nullptr;
  Status s = Status::Ok();
  if (header) {
    s = ParseTypedJob(*header, frames, kPayload, d_.models.served_configs(), d_.clock.Now(),
                      &request, &served, d_.limits, system_shm_ ? client_shm_ : nullptr,
                      [this](size_t served) { return d_.models.ServedVersionLoaded(served); });
  } else {
    // Only a broken FarmChannel sends this; its call is still answered.
    TF_LOG(kError) << "front-end typed request without its typed header"
                   << Kv("frames", frames.size()) << Kv("call", call_id.dump());
    s = Internal("the front end's typed request has no typed header frame");
  }
  Admit(held, frames, kPayload, served, s);
}

void JobAcceptor::Admit(HeldRequest& held, std::vector<zmq::message_t>& frames, size_t payload,
                        size_t served, Status s) {
  PendingRequest& request = *held;  // valid until Push takes it (then only on failure, untaken)
  const RequestOrigin origin = request.origin;
  if (std::string unloading;
      s.code() == StatusCode::kNotFound && d_.models.BeingUnloaded(s, &unloading)) {
    s = NotFound(unloading);
  }
  ServedModel* model = served < d_.models.served_index().size()
                           ? &d_.models[d_.models.served_index()[served]]
                           : nullptr;
  // The v2 front ends speak Triton's priorities; ZeroMQ clients name the level.
  if (s.ok() && origin != RequestOrigin::kZmq) {
    request.priority = TritonPriorityLevel(request.priority, model->config);
  }
  if (s.ok()) s = d_.replies.CheckUnread(request);
  if (s.ok()) s = d_.replies.AcquireQuota(request, frames[payload], curve_);
  if (s.ok() && IsDraining(d_.farm.phase))
    s = Unavailable("the farm is draining and accepts no new requests");
  if (s.ok() && !d_.models.Available(*model)) {
    FailIfNoWorkers(d_.models, d_.dispatcher, *model);
    s = Unavailable("model '" + model->config.name +
                    "' has no live worker: " + d_.models.Tally(*model).failure_reason);
  }
  if (s.ok()) Dispatcher::ApplyQueueWait(model->config, &request);
  if (s.ok()) Dispatcher::ApplyLatencySlo(model->config, &request);
  if (s.ok()) Dispatcher::ApplyClientWeight(model->config, &request);
  if (s.ok()) {
    bool only_by_margin = false;
    s = d_.dispatcher.CheckDeadline(*model, request, d_.clock.Now(), &only_by_margin);
    if (!s.ok() && model->config.latency_slo_ms > 0) {
      d_.dispatcher.RecordSloRefused(*model, only_by_margin);
    }
  }
  if (s.ok() && !model->queue.Push(held)) {
    s = ResourceExhausted("queue of model '" + model->config.name + "' is full (" +
                          std::to_string(model->queue.policy().max_queue_size) +
                          " requests, max_queue_size); retry later");
  }
  if (!s.ok()) {
    if (model) {
      model->stats.RecordRejected(s.code());
      if (metrics_)
        metrics_->RequestDone(model->config.name, model->config.version, s.code(), request.origin);
    }
    d_.replies.SendError(request, s);
  }
}

void JobAcceptor::RunShmCommand(PendingRequest& request, const ShmCommand& command,
                                const std::string& client) {
  if (command.op == RequestOp::kShmRelease) {
    Status s = client_shm_->Release(command.region);
    d_.replies.Send(request,
                    s.ok() ? MakeShmReleasedReply(request.id) : MakeErrorReply(request.id, s),
                    nullptr);
    return;
  }
  CreatedRegion created;
  Status s = IsDraining(d_.farm.phase)
                 ? Unavailable("the farm is draining and accepts no new requests")
                 : client_shm_->Create(command.bytes, client, d_.clock.Now(), &created);
  d_.replies.Send(request,
                  s.ok()
                      ? MakeShmCreatedReply(request.id, created.token, created.name, created.bytes)
                      : MakeErrorReply(request.id, s),
                  nullptr);
}

void JobAcceptor::AnswerFrontendMeta(FrontendHub& hub, FrontendRequest& call,
                                     const MetaAnswer& meta) {
  // [identity][query]: the query is the channel's own small object.
  json query = json::object();
  if (call.frames.size() > 1) {
    const std::string_view text(static_cast<const char*>(call.frames[1].data()),
                                call.frames[1].size());
    if (text.size() <= d_.limits.max_header_bytes && JsonNestingWithin(text, kMaxHeaderDepth)) {
      query = json::parse(text, nullptr, false);
      if (!query.is_object()) query = json::object();
    }
  }
  json reply = meta(query);
  reply["v"] = kProtocolVersion;
  reply["id"] = call.call_id;
  if (!reply.contains("status")) reply["status"] = "ok";
  const std::string text = reply.dump();
  FrontendMessage message;
  message.emplace_back(text.data(), text.size());
  hub.Reply(call.frames[0], std::move(message));  // false: the channel stopped and failed the call
}

void JobAcceptor::ReadFrontend(FrontendHub& hub, const MetaAnswer& meta) {
  FrontendRequest& call = frontend_call_;
  const ClearedOnExit cleared{call.frames};
  // Identity + header + inputs, and one more so ParseJob sees the excess (the front ends check
  // max_inputs first; this keeps the loop's bound whatever they send).
  const size_t max_frames = d_.limits.max_inputs + 3;
  for (int n = 0; n < kMaxMessagesPerTurn; ++n) {
    // What a refused request left is let go of here, not inside Pop under the lock every
    // channel pushes under.
    call.frames.clear();
    if (!hub.requests().Pop(&call)) break;
    if (call.frames.empty()) {
      // No identity to answer by: only a broken FarmChannel sends this.
      TF_LOG(kError) << "front-end request without its channel's identity dropped"
                     << Kv("call", call.call_id);
      continue;
    }
    if (call.frames.size() > max_frames) call.frames.resize(max_frames);
    if (call.tag == kMetaTag) {
      AnswerFrontendMeta(hub, call, meta);
      continue;
    }
    // The tag says the protocol and the client key (frontend_tag.h).
    FrontendTagParts parts = ReadFrontendTag(std::move(call.tag));
    const json call_id = call.call_id;
    if (call.typed) {
      AcceptTyped(call.frames, parts.origin, std::move(parts.client), call_id);
    } else {
      // [identity][header][data...] as on the job socket; a missing header is ParseJob's error.
      Accept(call.frames, parts.origin, std::move(parts.client), &call_id);
    }
  }
}

}  // namespace torchfarm
