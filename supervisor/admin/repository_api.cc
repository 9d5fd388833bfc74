#include "supervisor/admin/repository_api.h"

#include <algorithm>
#include <set>

#include "common/log.h"
#include "common/protocol.h"

namespace torchfarm {

using nlohmann::json;

namespace {

// The farm's lifecycle (FarmStatus::Models "state") as Triton's index names it.
const char* TritonState(const std::string& state) {
  if (state == "available" || state == "rolling") return "READY";
  if (state == "loading") return "LOADING";
  if (state == "unloading") return "UNLOADING";
  return "UNAVAILABLE";  // "unavailable", "failed"
}

json ErrorAnswer(const Status& status) {
  return {{"status", "error"},
          {"code", std::string(StatusCodeName(status.code()))},
          {"message", status.message()}};
}

}  // namespace

Status CheckRepositoryModelName(const std::string& name) {
  const std::string shown = "'" + name.substr(0, 200) + (name.size() > 200 ? "...'" : "'");
  if (name.empty()) return InvalidArgument("model name: expected a name, got an empty one");
  if (name.find('/') != std::string::npos || name.find("..") != std::string::npos ||
      name.find('\0') != std::string::npos || name.size() > 255) {
    return InvalidArgument("model name " + shown +
                           ": expected a model name of at most 255 bytes without '/', '..' or "
                           "NUL (a name, not a path)");
  }
  return Status::Ok();
}

std::vector<ModelConfig> RepositoryApi::ConfigFileModels() const {
  if (config_.source_path.empty()) return config_.models;
  FarmConfig fresh;
  if (!LoadConfigFile(config_.source_path, &fresh).ok()) return {};
  return fresh.models;
}

json RepositoryApi::Index(const std::string& model, bool ready_only) const {
  json entries = json::array();
  std::set<std::string> listed;
  const json farm_models = status_.Models().value("models", json::array());
  for (const json& m : farm_models) {
    const std::string name = m.value("name", "");
    if (!model.empty() && name != model) continue;
    listed.insert(name);
    const char* state = TritonState(m.value("state", ""));
    std::string reason = m.value("reason", "");
    if (std::string(state) == "UNAVAILABLE" && reason.empty()) reason = "no ready worker";
    entries.push_back({{"name", name},
                       {"version", m.value("version", "")},
                       {"state", state},
                       {"reason", reason}});
  }
  for (const ModelConfig& c : ConfigFileModels()) {
    if ((!model.empty() && c.name != model) || listed.count(c.name)) continue;
    entries.push_back({{"name", c.name},
                       {"version", c.version},
                       {"state", "UNAVAILABLE"},
                       {"reason", "unloaded"}});
  }
  if (ready_only) {
    json ready = json::array();
    for (json& e : entries) {
      if (e["state"] == "READY") ready.push_back(std::move(e));
    }
    entries = std::move(ready);
  }
  return {{"models", std::move(entries)}};
}

Status RepositoryApi::Load(const std::string& name, bool* started) {
  *started = false;
  const auto& served = models_.served_configs();
  if (std::any_of(served.begin(), served.end(),
                  [&](const ModelConfig& c) { return c.name == name; })) {
    return Status::Ok();  // as Triton, loading a loaded model succeeds (it is not re-read)
  }
  std::vector<ModelConfig> configs;
  for (const ModelConfig& c : ConfigFileModels()) {
    if (c.name == name) configs.push_back(c);
  }
  if (configs.empty()) {
    std::vector<ModelConfig> all = ConfigFileModels();
    return NotFound(
        "model '" + name + "' is not in the farm's config (" +
        (config_.source_path.empty() ? std::string("its models") : config_.source_path) +
        " has: " + ModelNames(all) + ")");
  }
  LoadResult result = control_.Load(name, configs);
  if (result.status.ok()) *started = true;
  return result.status;
}

Status RepositoryApi::Unload(const std::string& name, bool* started) {
  *started = false;
  const auto& served = models_.served_configs();
  if (std::none_of(served.begin(), served.end(),
                   [&](const ModelConfig& c) { return c.name == name; })) {
    for (const ModelConfig& c : ConfigFileModels()) {
      if (c.name == name) return Status::Ok();  // known and not loaded: nothing to do
    }
    return NotFound("model '" + name + "' is not served here (served: " + ModelNames(served) + ")");
  }
  UnloadResult result = control_.Unload(name);
  if (result.status.ok()) *started = true;
  return result.status;
}

json RepositoryApi::Answer(const json& query) {
  const json& action = query["repository"];
  const json* model = query.contains("model") ? &query["model"] : nullptr;
  if (!action.is_string() || (model != nullptr && !model->is_string())) {
    return ErrorAnswer(
        InvalidArgument("repository query: expected strings \"repository\" and "
                        "\"model\" (a front-end bug)"));
  }
  const std::string name = model != nullptr ? model->get<std::string>() : std::string();
  if (action == "index") {
    return Index(name, query.contains("ready") && query["ready"] == true);
  }
  if (action != "load" && action != "unload") {
    return ErrorAnswer(InvalidArgument("repository query: expected index, load or unload"));
  }
  if (Status s = CheckRepositoryModelName(name); !s.ok()) return ErrorAnswer(s);
  if (!config_.frontend.model_control) {
    return ErrorAnswer(Unavailable(
        "explicit model " + action.get<std::string>() +
        " is off on this farm: set \"frontend\": {\"model_control\": true} in its config to "
        "allow loads and unloads over HTTP and gRPC (torchfarm ctl load/unload always work)"));
  }
  bool started = false;
  Status s = action == "load" ? Load(name, &started) : Unload(name, &started);
  if (!s.ok()) return ErrorAnswer(s);
  TF_LOG(kInfo) << "repository request over the v2 front end"
                << Kv("action", action.get<std::string>()) << Kv("model", name)
                << Kv("started", started);
  return {{"started", started}};
}

}  // namespace torchfarm
