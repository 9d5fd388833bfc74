// Requests into the farm: reads the job socket (ZeroMQ clients) and the front-end hub's request
// mailbox (the HTTP and gRPC front ends' threads: loop/frontend_hub.h, frontend/farm_channel.h),
// parses and checks each request (intake/job_intake.h), runs client shared-memory commands, and
// queues what is accepted on its model — or answers it at once with the reason it cannot be
// (unknown or unloading model, quota, unread replies, draining, no live worker, a deadline that
// cannot be met, a full queue).
//
// Every request it reads is queued or answered, never dropped. Owns nothing. Loop thread only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/config.h"
#include "supervisor/admin/metrics_exporter.h"
#include "supervisor/dispatch/dispatcher.h"
#include "supervisor/dispatch/reply_writer.h"
#include "supervisor/intake/client_shm_registry.h"
#include "supervisor/intake/request_origin.h"
#include "supervisor/loop/farm_phase.h"
#include "supervisor/loop/frontend_hub.h"
#include "supervisor/models/model_table.h"

namespace torchfarm {

struct ShmCommand;  // intake/job_intake.h
struct PendingRequest;

class JobAcceptor {
 public:
  struct Deps {
    ModelTable& models;
    Dispatcher& dispatcher;
    ReplyWriter& replies;
    const FarmState& farm;
    const RequestLimits& limits;  // the config's: a reload changes them in place
    const TimeSource& clock;
  };
  // The answer to a front end's "meta" query, built by the caller from the query object (null
  // when unreadable): health and model metadata, with each model's statistics when the query
  // says {"statistics": true}; the dashboard's status (FarmStatus::Dashboard) when it says
  // {"dashboard": true}, with the events after "events_after" (a sequence number; 0: the latest
  // ones); the repository extension's calls when it has "repository", the logging extension's
  // when it has "logging". An answer with "status": "error" is sent as the error it is.
  using MetaAnswer = std::function<nlohmann::json(const nlohmann::json& query)>;

  explicit JobAcceptor(Deps deps) : d_(deps) {}
  void set_metrics(MetricsExporter* metrics) { metrics_ = metrics; }
  // Client regions (config client_shm); null: shared-memory commands and inputs are refused.
  void set_client_shm(ClientShmRegistry* registry) { client_shm_ = registry; }
  // frontend.system_shared_memory: front-end requests may name the registry's system regions.
  void set_system_shm(bool enabled) { system_shm_ = enabled; }
  // CURVE on: the quota key is the client's public key, not its routing id.
  void set_curve(bool curve) { curve_ = curve; }

  // The job socket is readable: up to kMaxMessagesPerTurn requests. True when it stopped because
  // a non-blocking receive found no message (EAGAIN: the socket is drained, its commands
  // processed; LoopPoller::DrainedWithoutInput), false when it stopped at the limit.
  bool ReadJobs(zmq::socket_t& jobs);
  // The front-end hub's request mailbox is readable: up to kMaxMessagesPerTurn requests, and
  // "meta" queries answered with `meta`. Every message is answered with its call id
  // (frontend/farm_channel.h), whatever its header holds.
  void ReadFrontend(FrontendHub& hub, const MetaAnswer& meta);
  // One request: frames[0] is the routing id; `origin` and `client` (the quota key) are set for
  // front-end requests, and `call_id`: the id every reply to it carries, also when its header
  // cannot be read.
  void Accept(std::vector<zmq::message_t>& frames, RequestOrigin origin = RequestOrigin::kZmq,
              std::string client = {}, const nlohmann::json* call_id = nullptr);
  // A front end's typed request (frontend/farm_channel.h): frames[0] is the routing id, frames[1]
  // the typed header (a frame that is not one is answered INTERNAL), data frames after it.
  void AcceptTyped(std::vector<zmq::message_t>& frames, RequestOrigin origin, std::string client,
                   const nlohmann::json& call_id);

 private:
  // After the parse, for every protocol: the model's state, quotas, deadlines and its queue (which
  // takes `held`), or the error reply (`s` not OK, or the first check that fails).
  void Admit(std::unique_ptr<PendingRequest>& held, std::vector<zmq::message_t>& frames,
             size_t payload, size_t served, Status s);
  void RunShmCommand(PendingRequest& request, const ShmCommand& command, const std::string& client);
  void AnswerFrontendMeta(FrontendHub& hub, FrontendRequest& call, const MetaAnswer& meta);

  Deps d_;
  MetricsExporter* metrics_ = nullptr;
  ClientShmRegistry* client_shm_ = nullptr;
  bool system_shm_ = false;
  bool curve_ = false;
  // The frames of the message being read, reused from one to the next (issue 36: no allocation
  // per request); empty between reads.
  std::vector<zmq::message_t> frames_;
  FrontendRequest frontend_call_;  // the front-end request being read
};

}  // namespace torchfarm
