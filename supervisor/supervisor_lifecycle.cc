// Supervisor, models loaded and unloaded at run time (the `load`, `unload` and `models` admin
// commands, in the spirit of Triton's model control API) and watch mode (config
// model_repository_poll_s: stat the config and model files, reload when one changed). Neither
// writes the config file: the next reload makes the farm match the file again. Loop thread only.
#include <algorithm>
#include <filesystem>

#include "common/log.h"
#include "supervisor/models/model_lifecycle.h"
#include "supervisor/supervisor.h"

namespace torchfarm {

using nlohmann::json;

namespace {

std::string Names(const std::vector<ModelConfig>& models) {
  std::string names;
  for (const auto& m : models) names += (names.empty() ? "" : ", ") + m.name;
  return names.empty() ? "none" : names;
}

}  // namespace

json Supervisor::Load(const json& request) {
  const std::string name = request["model"].get<std::string>();
  // Every version the entry loads (one for an entry without versions).
  std::vector<ModelConfig> configs;
  const std::string& file = config_.source_path;
  if (auto entry = request.find("config"); entry != request.end()) {
    if (!entry->is_object()) {
      return AdminError("load.config: expected a model entry object, got " +
                        std::string(entry->type_name()) + " " + entry->dump());
    }
    json with_name = *entry;
    if (!with_name.contains("name")) with_name["name"] = name;
    const std::string base = std::filesystem::path(file).parent_path().string();
    Status s = ParseModelConfig(with_name, "load.config", base, &configs);
    if (!s.ok()) return AdminError(s.message());
    if (!configs.empty() && configs[0].name != name) {
      return AdminError("load.config.name: expected \"" + name + "\" (the model field), got \"" +
                        configs[0].name + "\"");
    }
  } else {
    FarmConfig fresh;
    Status s = LoadConfigFile(file, &fresh);
    if (!s.ok()) return AdminError("load refused: " + s.message());
    for (const ModelConfig& m : fresh.models) {
      if (m.name == name) configs.push_back(m);
    }
    if (configs.empty()) {
      return AdminError(file + ": models has no entry named '" + name + "' (it has: " +
                        Names(fresh.models) + "); pass the entry with --config-json");
    }
  }
  if (FindModel(name))
    return AdminError("model '" + name + "' is already loaded; use reload to change it");
  if (IsDraining(farm_.phase)) return AdminError("the farm is draining; it loads no model");
  std::vector<FileIdentity> identities;
  for (const ModelConfig& config : configs) {
    identities.push_back(ReadFileIdentity(config.path));
    if (!identities.back().error.empty()) {
      return AdminError("model '" + name + "' version " + config.version + ": " +
                        identities.back().error);
    }
  }
  const size_t first_new = workers_.size();
  for (size_t k = 0; k < configs.size(); ++k) AddModel(configs[k], std::move(identities[k]));
  for (size_t i = first_new; i < workers_.size(); ++i) workers_.Launch(*workers_[i]);
  RebuildServedModels();
  const size_t started = workers_.size() - first_new;
  TF_LOG(kInfo) << "model loaded over the admin socket" << Kv("model", name)
                << Kv("versions", configs.size()) << Kv("workers", started);
  json reply = AdminOk("loading " + name + ": " + std::to_string(started) +
                       " worker(s) starting; served once one is ready");
  reply["model"] = name;
  return reply;
}

json Supervisor::Unload(const std::string& name) {
  if (!FindModel(name)) {
    return AdminError("no model '" + name + "' is loaded (loaded: " + Names(served_configs_) + ")");
  }
  size_t queued = 0, workers = 0;
  for (auto& model : models_) {  // every version of it
    if (model.removed || model.config.name != name) continue;
    model.removed = true;
    queued += model.queue.size();
    workers += model.slots.size();
  }
  RebuildServedModels();
  TF_LOG(kInfo) << "unloading model over the admin socket" << Kv("model", name)
                << Kv("queued", queued) << Kv("workers", workers);
  json reply = AdminOk("unloading " + name + ": new requests get NOT_FOUND; its " +
                       std::to_string(queued) + " queued request(s) and the batches in " +
                       "flight finish, then its " + std::to_string(workers) + " worker(s) stop");
  reply["model"] = name;
  return reply;
}

bool Supervisor::BeingUnloaded(const Status& not_found, std::string* message) const {
  for (const auto& model : models_) {
    if (!model.removed || model.slots.empty()) continue;
    // ParseJob's NOT_FOUND starts with the name the request gave.
    const std::string prefix = "model '" + model.config.name + "' ";
    if (not_found.message().rfind(prefix, 0) != 0) continue;
    *message = prefix + "is being unloaded";
    return true;
  }
  return false;
}

json Supervisor::ModelsJson() const {
  json models = json::array();
  for (const auto& model : models_) {
    if (model.removed && model.slots.empty()) continue;
    ModelWorkerCounts counts;
    std::string reason;
    for (size_t i : model.slots) {
      const WorkerSlot& slot = *workers_[i];
      if (slot.state() == SlotState::kReady) {
        ++counts.ready;
      } else if (slot.MayServeSoon()) {
        ++counts.starting;
      }
      if (!slot.failure_reason().empty()) reason = slot.failure_reason();
    }
    const ModelLifecycle state =
        LifecycleOf(model.removed, model.rollout.state == RolloutState::kRolling, counts);
    json m = {{"name", model.config.name},
              {"path", model.config.path},
              {"state", ModelLifecycleName(state)},
              {"ready_workers", counts.ready},
              {"workers", model.slots.size()},
              {"queue_depth", model.queue.size()},
              {"reason", reason}};
    if (model.rollout.state != RolloutState::kNone) m["rollout"] = RolloutJson(model);
    models.push_back(std::move(m));
  }
  return {{"ok", true}, {"config", config_.source_path}, {"models", models}};
}

void Supervisor::WatchFiles(TimePoint now) {
  if (config_.model_repository_poll_s <= 0 || now < next_watch_) return;
  next_watch_ = now + std::chrono::seconds(config_.model_repository_poll_s);
  for (const auto& model : models_) {
    // A reload during a rollout leaves that model alone; look again once it is over.
    if (model.rollout.state == RolloutState::kRolling) return;
  }
  std::vector<std::string> paths = {config_.source_path};
  for (size_t i : served_index_) paths.push_back(models_[i].config.path);
  const std::vector<std::string> changed = file_watch_.Scan(paths);
  if (changed.empty() || IsDraining(farm_.phase)) return;
  std::string what;
  for (const auto& line : changed) what += (what.empty() ? "" : "; ") + line;
  TF_LOG(kInfo) << "watched files changed; reloading (model_repository_poll_s)"
                << Kv("changed", what);
  const json reply = Reload();
  if (!reply.value("ok", false)) {
    TF_LOG(kWarn) << "reload after a file change refused" << Kv("error", reply.value("error", ""));
  }
  // The reload may have loaded or dropped models: remember their files as they are now.
  paths = {config_.source_path};
  for (size_t i : served_index_) paths.push_back(models_[i].config.path);
  file_watch_.Scan(paths);
}

}  // namespace torchfarm
