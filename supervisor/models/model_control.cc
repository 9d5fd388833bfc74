#include "supervisor/models/model_control.h"

#include <algorithm>

#include "common/log.h"
#include "common/worker_count.h"
#include "supervisor/admin/process_stats.h"
#include "supervisor/dispatch/model_queue.h"

namespace torchfarm {

namespace {

std::string JoinNotes(const std::vector<std::string>& parts) {
  std::string joined;
  for (const auto& part : parts) joined += (joined.empty() ? "" : ", ") + part;
  return joined;
}

}  // namespace

size_t ModelControl::Add(const ModelConfig& config, FileIdentity file) {
  const size_t index = models_.Add(config, std::move(file));
  spares_.Add(index);
  return index;
}

void ModelControl::LaunchFrom(size_t first_slot) {
  for (size_t i = first_slot; i < workers_.size(); ++i) workers_.Launch(*workers_[i]);
}

LoadResult ModelControl::Load(const std::string& name, const std::vector<ModelConfig>& configs) {
  if (models_.Find(name)) {
    return {Unavailable("model '" + name + "' is already loaded; use reload to change it"), name};
  }
  if (IsDraining(farm_.phase))
    return {Unavailable("the farm is draining; it loads no model"), name};
  std::vector<FileIdentity> identities;
  for (const ModelConfig& config : configs) {
    identities.push_back(ReadFileIdentity(config.path));
    if (!identities.back().error.empty()) {
      return {InvalidArgument("model '" + name + "' version " + config.version + ": " +
                              identities.back().error),
              name};
    }
  }
  const size_t first_new = workers_.size();
  models_.ForgetFailedLoads(name);
  for (size_t k = 0; k < configs.size(); ++k) {
    models_[Add(configs[k], std::move(identities[k]))].load_pending = true;
  }
  LaunchFrom(first_new);
  models_.RebuildServed();
  const size_t started = workers_.size() - first_new;
  TF_LOG(kInfo) << "model loaded over the admin socket" << Kv("model", name)
                << Kv("versions", configs.size()) << Kv("workers", started);
  return {Status::Ok(), name, configs.size(), started};
}

UnloadResult ModelControl::Unload(const std::string& name) {
  if (!models_.Find(name)) {
    return {NotFound("no model '" + name +
                     "' is loaded (loaded: " + ModelNames(models_.served_configs()) + ")"),
            name};
  }
  UnloadResult result{Status::Ok(), name};
  for (ServedModel& model : models_) {  // every version of it
    if (model.removed || model.config.name != name) continue;
    model.removed = true;
    result.queued += model.queue.size();
    result.workers += model.slots.size();
  }
  models_.RebuildServed();
  TF_LOG(kInfo) << "unloading model over the admin socket" << Kv("model", name)
                << Kv("queued", result.queued) << Kv("workers", result.workers);
  return result;
}

ScaleResult ModelControl::Scale(const std::string& name, int count, const std::string& version) {
  // The one bound of config, reload and admin alike (common/worker_count.h).
  if (Status s = CheckWorkerCount(count, "scale.count"); !s.ok()) return {s, name};
  ServedModel* model = models_.Find(name, version);
  if (!model) {
    return {
        NotFound("no model '" + name + "'" + (version.empty() ? "" : " version '" + version + "'")),
        name};
  }
  if (model->rollout.state == RolloutState::kRolling) {
    return {Unavailable("model '" + name + "' is being rolled out (rollout " +
                        std::to_string(model->rollout.id) + "); scale it once that is over"),
            name};
  }
  return models_.ScaleTo(*model, count);
}

ModelReloadReport ModelControl::Reload(const FarmConfig& running, const FarmConfig& fresh) {
  ModelReloadReport report;
  // A reload reads each model file of the fresh config once, whole, to hash it (file_identity.h).
  ModelFiles files;
  for (const ModelConfig& m : fresh.models)
    files.fresh[ModelFiles::Key(m)] = ReadFileIdentity(m.path);
  for (size_t i : models_.served_index()) {
    files.served[ModelFiles::Key(models_[i].config)] = models_[i].file;
  }
  const ReloadPlan plan =
      PlanReload(running, models_.served_configs(), fresh, AvailableCores(), files);
  if (!plan.needs_restart.empty()) {
    report.notes.push_back(JoinNotes(plan.needs_restart) + " changed: a restart applies " +
                           (plan.needs_restart.size() == 1 ? "it" : "them"));
  }
  for (const ModelConfig& m : plan.added) {
    const size_t first_new = workers_.size();
    Add(m, files.fresh[ModelFiles::Key(m)]);
    LaunchFrom(first_new);
    report.notes.push_back("added " + m.name + " version " + m.version);
  }
  const uint64_t first_rollout = rollouts_.next_id();
  for (const ModelUpdate& update : plan.updated) {
    report.notes.push_back(ApplyUpdate(update, files.fresh[ModelFiles::Key(update.config)]));
    const ServedModel* model = models_.Find(update.config.name, update.config.version);
    if (model->rollout.id >= first_rollout) {
      report.rollouts.emplace_back(model->config.name, model->rollout);
    }
  }
  for (const ModelConfig& gone : plan.removed) {
    ServedModel* model = models_.Find(gone.name, gone.version);
    // A version whose model keeps another: it serves until one of those is loaded.
    if (std::any_of(fresh.models.begin(), fresh.models.end(),
                    [&](const ModelConfig& m) { return m.name == gone.name; })) {
      model->retire_when_replaced = true;
      report.notes.push_back("removing " + gone.name + " version " + gone.version +
                             " once another version is ready");
      continue;
    }
    model->removed = true;
    report.notes.push_back("removing " + gone.name + " once its " +
                           std::to_string(model->queue.size()) + " queued request(s) are served");
  }
  models_.RebuildServed();
  return report;
}

std::string ModelControl::ApplyUpdate(const ModelUpdate& update, const FileIdentity& file) {
  const ModelConfig& m = update.config;
  ServedModel* existing = models_.Find(m.name, m.version);
  existing->retire_when_replaced = false;  // listed again by this config
  if (existing->rollout.state == RolloutState::kRolling) {
    // Its workers run two configs already; a third would make rollback ambiguous.
    return m.name + ": unchanged, rollout " + std::to_string(existing->rollout.id) +
           " is still in progress (" + std::to_string(existing->rollout.replaced()) + "/" +
           std::to_string(existing->rollout.total) + "); reload again once it is over";
  }
  const ModelConfig previous_config = existing->config;
  const FileIdentity previous_file = existing->file;
  const int ready_before = models_.Tally(*existing).ready;
  existing->config = m;
  existing->file = file;
  existing->queue.SetPolicy(BatchingPolicyFor(m));
  // New workers run another file, format or pipeline: its cost is learnt afresh (the stall cap
  // would otherwise take ~15-30 batches to believe a much slower model).
  if (update.replace_workers) {
    existing->cost = BatchCostModel();
    existing->service = BatchCostModel();
    existing->slo_margin = SloMargin();
  }
  spares_.Reconcile(*existing, previous_config, update);
  if (update.replace_at_once) return ReplaceAllAtOnce(*existing, update);
  const std::vector<InstanceConfig>& wanted = update.instances;
  const int wanted_count = static_cast<int>(wanted.size());
  std::string scaled;
  // Fewer workers: the youngest go first, before the rest is rolled.
  if (wanted_count < models_.Tally(*existing).live) {
    scaled = models_.ScaleTo(*existing, wanted_count).Describe();
  }
  std::vector<size_t> outdated;
  std::vector<InstanceConfig> replacements;
  size_t k = 0;
  for (size_t i : existing->slots) {
    WorkerSlot& slot = *workers_[i];
    if (slot.retiring()) continue;
    const InstanceConfig& instance =
        wanted.empty() ? slot.instance() : wanted[std::min(k++, wanted.size() - 1)];
    if (!WorkerNeedsReplacing(update, slot.instance(), instance)) {
      slot.UpdateConfig(m, instance);
      continue;
    }
    // Keeps its old config until it is retired: a crash relaunches the old model.
    outdated.push_back(i);
    replacements.push_back(instance);
  }
  if (wanted_count > models_.Tally(*existing).live) {
    scaled = models_.ScaleTo(*existing, wanted_count).Describe();
  }
  std::string rolled;
  if (!outdated.empty()) {
    rollouts_.Start(*existing, std::move(outdated), std::move(replacements), previous_config,
                    previous_file, ready_before);
    const ModelRollout& r = existing->rollout;
    rolled = " (rollout " + std::to_string(r.id) + ": " + std::to_string(r.total) +
             " worker(s) to replace, surge " + std::to_string(m.rollout.max_surge) +
             ", unavailable " + std::to_string(m.rollout.max_unavailable) +
             (update.file_changed ? ", model file changed" : "") + ")";
  }
  return m.name + rolled + (scaled.empty() ? "" : ": " + scaled);
}

std::string ModelControl::ReplaceAllAtOnce(ServedModel& model, const ModelUpdate& update) {
  const ModelConfig& m = update.config;
  const std::vector<InstanceConfig>& wanted = update.instances;
  size_t k = 0, replaced = 0;
  for (size_t i : model.slots) {
    WorkerSlot& slot = *workers_[i];
    if (slot.retiring()) continue;
    const InstanceConfig& instance =
        wanted.empty() ? slot.instance() : wanted[std::min(k++, wanted.size() - 1)];
    slot.UpdateConfig(m, instance);
    // A slot without a process (backing off, failed) launches the new config anyway.
    if (slot.state() != SlotState::kReady && slot.state() != SlotState::kStarting) continue;
    slot.BeginGracefulRestart("config reloaded: ring geometry or inputs changed");
    ++replaced;
  }
  const ScaleResult scaled = models_.ScaleTo(model, static_cast<int>(wanted.size()));
  return m.name +
         (replaced > 0 ? " (" + std::to_string(replaced) +
                             " worker(s) replaced at once (ring or inputs changed))"
                       : "") +
         ": " + scaled.Describe();
}

void ModelControl::RetireIdle() {
  for (ServedModel& model : models_) {
    if (model.removed && model.queue.empty()) {
      for (size_t i : model.slots) {
        if (!workers_[i]->retiring()) {
          WorkerPool::Retire(*workers_[i], "model unloaded or removed by reload");
        }
      }
    }
    if (model.removed) spares_.Retire(model, "model unloaded or removed by reload");
    auto gone = [&](size_t i) {
      return workers_[i]->retiring() && workers_[i]->state() == SlotState::kStopped;
    };
    model.slots.erase(std::remove_if(model.slots.begin(), model.slots.end(), gone),
                      model.slots.end());
    model.spares.erase(std::remove_if(model.spares.begin(), model.spares.end(), gone),
                       model.spares.end());
  }
}

void ModelControl::DropFailedLoads() {
  bool changed = false;
  for (ServedModel& model : models_) {
    if (!model.load_pending || model.removed) continue;
    if (models_.HasReadyWorker(model)) {
      model.load_pending = false;
      continue;
    }
    if (model.slots.empty() || models_.Available(model)) continue;  // may still come up
    const std::string reason = models_.Tally(model).failure_reason;
    TF_LOG(kError) << "model load failed: every worker failed before one was ready; the model "
                      "is unregistered"
                   << Kv("model", model.config.name) << Kv("version", model.config.version)
                   << Kv("path", model.config.path) << Kv("reason", reason);
    models_.NoteFailedLoad({model.config.name, model.config.version, model.config.path, reason});
    model.removed = true;
    model.load_pending = false;
    changed = true;
  }
  if (changed) models_.RebuildServed();
}

void ModelControl::FindReclaimable(std::vector<bool>* slot_gone,
                                   std::vector<bool>* model_gone) const {
  std::vector<bool> listed(workers_.size(), false);
  model_gone->assign(models_.size(), false);
  for (size_t m = 0; m < models_.size(); ++m) {
    const ServedModel& model = models_[m];
    for (const auto* list : {&model.slots, &model.spares, &model.rollout.outdated,
                             &model.rollout.retired, &model.rollout.replacements}) {
      for (size_t i : *list) listed[i] = true;
    }
    (*model_gone)[m] = model.removed && model.queue.empty() && model.slots.empty() &&
                       model.spares.empty() && model.rollout.state != RolloutState::kRolling;
  }
  slot_gone->assign(workers_.size(), false);
  for (size_t i = 0; i < workers_.size(); ++i) {
    const WorkerSlot& slot = *workers_[i];
    (*slot_gone)[i] =
        !listed[i] && slot.retiring() && slot.state() == SlotState::kStopped && slot.pid() <= 0;
    if (!(*slot_gone)[i]) (*model_gone)[slot.model_index()] = false;  // still its model's
  }
}

size_t ModelControl::ReclaimRemoved() {
  // Every loop turn: without a removed model or a retired slot there is nothing to look at (and
  // nothing to allocate).
  const bool maybe =
      std::any_of(models_.begin(), models_.end(), [](const ServedModel& m) { return m.removed; }) ||
      std::any_of(workers_.begin(), workers_.end(),
                  [](const auto& slot) { return slot->retiring(); });
  if (!maybe) return 0;
  std::vector<bool> slot_gone, model_gone;
  FindReclaimable(&slot_gone, &model_gone);
  const size_t slots = static_cast<size_t>(std::count(slot_gone.begin(), slot_gone.end(), true));
  const size_t models = static_cast<size_t>(std::count(model_gone.begin(), model_gone.end(), true));
  if (slots + models == 0) return 0;
  const std::vector<size_t> slot_moved = workers_.EraseSlots(slot_gone);
  const std::vector<size_t> model_moved = models_.EraseModels(model_gone);
  for (const auto& slot : workers_) slot->set_model_index(model_moved[slot->model_index()]);
  for (ServedModel& model : models_) {
    for (auto* list : {&model.slots, &model.spares, &model.rollout.outdated, &model.rollout.retired,
                       &model.rollout.replacements}) {
      for (size_t& i : *list) i = slot_moved[i];
    }
  }
  models_.RebuildServed();
  TF_LOG(kDebug) << "reclaimed what removed models held" << Kv("models", models)
                 << Kv("slots", slots);
  return slots + models;
}

bool ModelControl::RetireReplacedVersions() {
  bool changed = false;
  for (ServedModel& model : models_) {
    if (!model.retire_when_replaced || model.removed) continue;
    const bool replaced =
        std::any_of(models_.begin(), models_.end(), [&](const ServedModel& other) {
          return &other != &model && !other.removed && !other.retire_when_replaced &&
                 other.config.name == model.config.name && models_.HasReadyWorker(other);
        });
    if (!replaced) continue;
    TF_LOG(kInfo) << "another version is ready; removing the version a reload dropped"
                  << Kv("model", model.config.name) << Kv("version", model.config.version)
                  << Kv("queued", model.queue.size());
    model.removed = true;
    model.retire_when_replaced = false;
    changed = true;
  }
  if (changed) models_.RebuildServed();
  return changed;
}

std::vector<std::string> ModelControl::WatchedPaths(const std::string& config_path) const {
  std::vector<std::string> paths = {config_path};
  for (size_t i : models_.served_index()) paths.push_back(models_[i].config.path);
  return paths;
}

}  // namespace torchfarm
