#include "supervisor/models/model_table.h"

#include <sys/stat.h>

#include <algorithm>

#include "common/log.h"
#include "common/model_versions.h"
#include "supervisor/admin/process_stats.h"
#include "supervisor/dispatch/dispatcher.h"
#include "supervisor/models/reload_plan.h"

namespace torchfarm {

std::string ModelNames(const std::vector<ModelConfig>& models) {
  std::string names;
  for (const auto& m : models) names += (names.empty() ? "" : ", ") + m.name;
  return names.empty() ? "none" : names;
}

size_t ModelTable::Add(const ModelConfig& config, FileIdentity file) {
  models_.push_back(ServedModel{config,
                                ModelQueue(BatchingPolicyFor(config)),
                                ModelStats(clock_.Now()),
                                {},
                                false,
                                BatchCostModel()});
  models_.back().file = std::move(file);
  const size_t index = models_.size() - 1;
  for (const auto& instance : ExpandInstances(config, AvailableCores())) AddSlot(index, instance);
  return index;
}

size_t ModelTable::AddSlot(size_t index, const InstanceConfig& instance) {
  ServedModel& model = models_[index];
  model.slots.push_back(workers_.Add(model.config, instance, index));
  return model.slots.back();
}

ScaleResult ModelTable::ScaleTo(ServedModel& model, int count) {
  std::vector<size_t> live;
  for (size_t i : model.slots) {
    if (!workers_[i]->retiring()) live.push_back(i);
  }
  const int before = static_cast<int>(live.size());
  const size_t index = IndexOf(model);
  // New workers take the config's instance entries in order (the n-th worker the n-th entry);
  // beyond them, the last entry.
  const std::vector<InstanceConfig> instances = ExpandInstances(model.config, AvailableCores());
  for (int n = before; n < count; ++n) {
    const size_t k = static_cast<size_t>(n);
    const size_t slot = AddSlot(
        index, instances.empty() ? InstanceConfig{} : instances[std::min(k, instances.size() - 1)]);
    workers_.Launch(*workers_[slot]);
  }
  // Remove the youngest workers first: the older ones are warm.
  for (int n = before; n > count; --n) {
    WorkerPool::Retire(*workers_[live[static_cast<size_t>(n - 1)]], "scaled down");
  }
  TF_LOG(kInfo) << "scaled" << Kv("model", model.config.name) << Kv("from", before)
                << Kv("to", count);
  return {Status::Ok(), model.config.name, before, count};
}

ServedModel* ModelTable::Find(const std::string& name, const std::string& version) {
  size_t served = 0;
  return SelectServed(name, version, &served) ? &models_[served_index_[served]] : nullptr;
}

bool ModelTable::SelectServed(const std::string& name, const std::string& version,
                              size_t* served) const {
  return SelectServedVersion(
             served_configs_, name, version, [this](size_t i) { return ServedVersionLoaded(i); },
             served)
      .ok();
}

bool ModelTable::ServedVersionLoaded(size_t served) const {
  return served < served_index_.size() && HasReadyWorker(models_[served_index_[served]]);
}

std::vector<std::string> ModelTable::ServedVersions(const std::string& name) const {
  return VersionsOf(served_configs_, name);
}

std::string ModelTable::DefaultVersion(const std::string& name) const {
  size_t chosen = 0;
  return SelectServed(name, {}, &chosen) ? served_configs_[chosen].version : std::string();
}

void ModelTable::RebuildServed() {
  served_configs_.clear();
  served_index_.clear();
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i].removed) continue;
    served_configs_.push_back(models_[i].config);
    served_index_.push_back(i);
  }
}

std::vector<size_t> ModelTable::EraseModels(const std::vector<bool>& erase) {
  std::vector<size_t> moved(models_.size(), WorkerPool::kErased);
  std::vector<ServedModel> kept;
  kept.reserve(models_.size());
  for (size_t m = 0; m < models_.size(); ++m) {
    if (m < erase.size() && erase[m]) continue;
    moved[m] = kept.size();
    kept.push_back(std::move(models_[m]));
  }
  models_ = std::move(kept);  // the same vector object: the Dispatcher holds a reference to it
  return moved;
}

void ModelTable::NoteFailedLoad(FailedLoad load) {
  ForgetFailedLoads(load.name, load.version);
  failed_loads_.push_back(std::move(load));
  while (failed_loads_.size() > kFailedLoadsKept) failed_loads_.pop_front();
}

void ModelTable::ForgetFailedLoads(const std::string& name, const std::string& version) {
  failed_loads_.erase(std::remove_if(failed_loads_.begin(), failed_loads_.end(),
                                     [&](const FailedLoad& f) {
                                       return f.name == name &&
                                              (version.empty() || f.version == version);
                                     }),
                      failed_loads_.end());
}

Status ModelTable::CheckModelFile(const WorkerSlot& slot) const {
  if (slot.model_index() >= models_.size()) return Status::Ok();
  const ServedModel& model = models_[slot.model_index()];
  // A worker a rollout has not replaced yet still runs the previous config and file.
  const ModelRollout& r = model.rollout;
  const bool outdated = r.state == RolloutState::kRolling &&
                        std::any_of(r.outdated.begin(), r.outdated.end(),
                                    [&](size_t i) { return workers_[i] == &slot; });
  const FileIdentity* loaded = outdated ? &r.previous_file : &model.file;
  if (loaded->size < 0 || loaded->path != slot.model_path()) return Status::Ok();
  struct stat st {};
  if (::stat(loaded->path.c_str(), &st) != 0) return Status::Ok();  // the worker says why
  if (loaded->StatUnchanged(st)) return Status::Ok();
  // Written, touched or renamed over since the load: the bytes decide.
  const FileIdentity now = ReadFileIdentity(loaded->path);
  if (now.size == loaded->size && now.hash == loaded->hash) return Status::Ok();  // touched only
  return Unavailable("model file changed since version " + model.config.version +
                     " was loaded; reload to serve it (" + loaded->path + ": loaded " +
                     loaded->Describe() + ", now " + now.Describe() + ")");
}

ModelWorkerTally ModelTable::Tally(const ServedModel& model) const {
  ModelWorkerTally tally;
  for (size_t i : model.slots) {
    const WorkerSlot& slot = *workers_[i];
    if (slot.state() == SlotState::kReady) {
      ++tally.ready;
    } else if (slot.MayServeSoon()) {
      ++tally.starting;
    }
    tally.live += !slot.retiring();
    if (!slot.failure_reason().empty()) tally.failure_reason = slot.failure_reason();
  }
  for (size_t i : model.spares) {
    tally.spares_ready += workers_[i]->state() == SlotState::kReady && !workers_[i]->retiring();
  }
  return tally;
}

bool ModelTable::HasReadyWorker(const ServedModel& model) const {
  return std::any_of(model.slots.begin(), model.slots.end(),
                     [&](size_t i) { return workers_[i]->state() == SlotState::kReady; });
}

bool ModelTable::Available(const ServedModel& model) const {
  // A restarting worker serves again soon: its model's requests wait for it (up to their
  // deadline or max_queue_wait_ms). Only failed or stopped workers cannot.
  auto may_serve = [&](size_t i) { return workers_[i]->MayServeSoon(); };
  if (std::any_of(model.slots.begin(), model.slots.end(), may_serve)) return true;
  // A spare serves only in the place of a serving slot (spare_policy.h), and not during a
  // rollout: without such a place it cannot help, and requests must not wait for it.
  const bool has_place = std::any_of(model.slots.begin(), model.slots.end(),
                                     [&](size_t i) { return !workers_[i]->retiring(); });
  return has_place && model.rollout.state != RolloutState::kRolling &&
         std::any_of(model.spares.begin(), model.spares.end(), may_serve);
}

bool ModelTable::BeingUnloaded(const Status& not_found, std::string* message) const {
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

}  // namespace torchfarm
