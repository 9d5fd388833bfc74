#include "supervisor/events/job_acceptor.h"

#include <string_view>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/protocol.h"
#include "supervisor/events/worker_events.h"
#include "supervisor/frontend/frontend_endpoint.h"
#include "supervisor/intake/job_intake.h"
#include "supervisor/zmq_util.h"

namespace torchfarm {

using nlohmann::json;

void JobAcceptor::ReadJobs(zmq::socket_t& jobs) {
  std::vector<zmq::message_t> frames;
  // Envelope (identity, delimiter) + header + inputs, and one more so ParseJob sees the excess.
  const size_t max_frames = d_.limits.max_inputs + 4;
  bool truncated = false;
  for (int n = 0;
       n < kMaxMessagesPerTurn && ReceiveMultipartBounded(jobs, &frames, max_frames, &truncated);
       ++n) {
    Accept(frames);
  }
}

void JobAcceptor::Accept(std::vector<zmq::message_t>& frames, RequestOrigin origin,
                         std::string client) {
  PendingRequest request;
  request.origin = origin;
  request.client = std::move(client);
  size_t payload = 0;
  if (!SplitEnvelope(frames, &request, &payload)) return;
  size_t served = d_.models.served_index().size();
  ShmCommand command;
  // Front-end requests never name client regions: those belong to ZeroMQ clients on this host.
  Status s =
      ParseJob(frames, payload, d_.models.served_configs(), d_.clock.Now(), &request, &served,
               d_.limits, origin == RequestOrigin::kZmq ? client_shm_ : nullptr, &command,
               [this](size_t served) { return d_.models.ServedVersionLoaded(served); });
  if (s.ok() && command.op != RequestOp::kInfer) {
    RunShmCommand(request, command, ClientKey(request.identity, frames[payload], curve_));
    return;
  }
  if (std::string unloading;
      s.code() == StatusCode::kNotFound && d_.models.BeingUnloaded(s, &unloading)) {
    s = NotFound(unloading);
  }
  ServedModel* model = served < d_.models.served_index().size()
                           ? &d_.models[d_.models.served_index()[served]]
                           : nullptr;
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
  if (s.ok()) {
    s = d_.dispatcher.CheckDeadline(*model, request, d_.clock.Now());
    if (!s.ok() && model->config.latency_slo_ms > 0) model->stats.RecordSloRefused();
  }
  if (s.ok() && !model->queue.Push(request)) {
    s = ResourceExhausted("queue of model '" + model->config.name + "' is full (" +
                          std::to_string(model->queue.policy().max_queue_size) +
                          " requests, max_queue_size); retry later");
  }
  if (!s.ok()) {
    if (model) {
      model->stats.RecordRejected();
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

void JobAcceptor::ReadFrontend(zmq::socket_t& frontend, const MetaAnswer& meta) {
  std::vector<zmq::message_t> frames;
  // Routing id + tag + header + inputs, and one more so ParseJob sees the excess.
  const size_t max_frames = d_.limits.max_inputs + 4;
  bool truncated = false;
  for (int n = 0; n < kMaxMessagesPerTurn &&
                  ReceiveMultipartBounded(frontend, &frames, max_frames, &truncated);
       ++n) {
    if (frames.size() < 3) continue;  // a channel always sends tag + header
    const std::string tag(static_cast<const char*>(frames[1].data()), frames[1].size());
    if (tag == kMetaTag) {
      json query = json::parse(
          std::string_view(static_cast<const char*>(frames[2].data()), frames[2].size()), nullptr,
          false);
      json reply = meta();
      reply["v"] = kProtocolVersion;
      reply["id"] = query.is_object() ? query.value("id", json()) : json();
      reply["status"] = "ok";
      frontend.send(frames[0], zmq::send_flags::sndmore);
      frontend.send(zmq::buffer(reply.dump()), zmq::send_flags::none);
      continue;
    }
    const RequestOrigin origin =
        tag.rfind("grpc", 0) == 0 ? RequestOrigin::kGrpc : RequestOrigin::kHttp;
    frames.erase(frames.begin() + 1);  // [routing][header][data...] as on the job socket
    Accept(frames, origin, tag);
  }
}

}  // namespace torchfarm
