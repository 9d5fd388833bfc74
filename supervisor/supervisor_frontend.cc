// Supervisor, the front-end socket: requests and metadata queries from the HTTP and gRPC front
// ends' threads (supervisor/frontend/farm_channel.h has the message format). A request is an
// ordinary job from here on; a "meta" query is answered at once from the loop's own state, so
// "live" means this loop answered and "ready" is what `torchfarm ctl health` says.
#include <algorithm>
#include <string_view>

#include "common/log.h"
#include "common/model_versions.h"
#include "common/protocol.h"
#include "supervisor/dispatch/model_metadata.h"
#include "supervisor/frontend/frontend.h"
#include "supervisor/supervisor.h"
#include "supervisor/zmq_util.h"

namespace torchfarm {

using nlohmann::json;

Status Supervisor::StartFrontend() {
  if (!config_.frontend.enabled()) return Status::Ok();
  try {
    frontend_jobs_.set(zmq::sockopt::linger, 0);
    frontend_jobs_.set(zmq::sockopt::sndhwm, 0);
    frontend_jobs_.set(zmq::sockopt::rcvhwm, 0);
    frontend_jobs_.bind(kFrontendEndpoint);
  } catch (const zmq::error_t& e) {
    return Internal(std::string("cannot bind the front-end socket: ") + e.what());
  }
  replies_.set_frontend_socket(&frontend_jobs_);
  frontend_ = std::make_unique<Frontend>();
  return frontend_->Start(config_.frontend, context_);
}

void Supervisor::HandleFrontendJobs() {
  std::vector<zmq::message_t> frames;
  // Routing id + tag + header + inputs, and one more so ParseJob sees the excess.
  const size_t max_frames = config_.limits.request.max_inputs + 4;
  bool truncated = false;
  for (int n = 0; n < kMaxMessagesPerTurn &&
                  ReceiveMultipartBounded(frontend_jobs_, &frames, max_frames, &truncated);
       ++n) {
    if (frames.size() < 3) continue;  // a channel always sends tag + header
    const std::string tag(static_cast<const char*>(frames[1].data()), frames[1].size());
    if (tag == kMetaTag) {
      json query = json::parse(std::string_view(static_cast<const char*>(frames[2].data()),
                                                frames[2].size()),
                               nullptr, false);
      json reply = FrontendMetaJson();
      reply["v"] = kProtocolVersion;
      reply["id"] = query.is_object() ? query.value("id", json()) : json();
      reply["status"] = "ok";
      frontend_jobs_.send(frames[0], zmq::send_flags::sndmore);
      frontend_jobs_.send(zmq::buffer(reply.dump()), zmq::send_flags::none);
      continue;
    }
    const RequestOrigin origin =
        tag.rfind("grpc", 0) == 0 ? RequestOrigin::kGrpc : RequestOrigin::kHttp;
    frames.erase(frames.begin() + 1);  // [routing][header][data...] as on the job socket
    AcceptJob(frames, origin, tag);
  }
}

// One entry per served (name, version): its health, its metadata ("versions" lists every loaded
// version of the name) and "default": true on the version a request without one gets.
json Supervisor::FrontendMetaJson() const {
  json health = HealthJson();
  json& models = health["models"];
  for (const auto& model : models_) {
    if (model.removed) continue;
    const ModelConfig& config = model.config;
    auto it = std::find_if(models.begin(), models.end(), [&](const json& m) {
      return m.value("name", "") == config.name && m.value("version", "") == config.version;
    });
    if (it == models.end()) continue;
    const bool ready = it->value("ready", false) && !IsDraining(farm_.phase);
    it->update(ModelMetadataJson(model, ready, ServedVersions(config.name)));
    size_t chosen = 0;
    const bool is_default = SelectServedVersion(
                                served_configs_, config.name, {},
                                [this](size_t i) { return ServedVersionLoaded(i); }, &chosen)
                                .ok() &&
                            served_configs_[chosen].version == config.version;
    (*it)["default"] = is_default;
  }
  return health;
}

}  // namespace torchfarm
