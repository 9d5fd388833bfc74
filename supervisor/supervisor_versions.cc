// Supervisor, model versions: every loaded version of a model is its own ServedModel (its own
// workers, queue and stats), found by (name, version); a request without a version runs on the
// default one, the latest loaded (common/model_versions.h). A reload that drops a version while
// another version of the model is still loading keeps the dropped one serving until a
// replacement is ready, so a version swap never leaves the model without a loaded version.
// Loop thread only.
#include <algorithm>

#include "common/log.h"
#include "common/model_versions.h"
#include "supervisor/supervisor.h"

namespace torchfarm {

Supervisor::Model* Supervisor::FindModel(const std::string& name, const std::string& version) {
  size_t served = 0;
  if (!SelectServedVersion(
           served_configs_, name, version, [this](size_t i) { return ServedVersionLoaded(i); },
           &served)
           .ok()) {
    return nullptr;
  }
  return &models_[served_index_[served]];
}

bool Supervisor::HasReadyWorker(const Model& model) const {
  return std::any_of(model.slots.begin(), model.slots.end(),
                     [&](size_t i) { return workers_[i]->state() == SlotState::kReady; });
}

bool Supervisor::ServedVersionLoaded(size_t served) const {
  return served < served_index_.size() && HasReadyWorker(models_[served_index_[served]]);
}

std::vector<std::string> Supervisor::ServedVersions(const std::string& name) const {
  return VersionsOf(served_configs_, name);
}

void Supervisor::RetireReplacedVersions() {
  bool changed = false;
  for (Model& model : models_) {
    if (!model.retire_when_replaced || model.removed) continue;
    const bool replaced = std::any_of(models_.begin(), models_.end(), [&](const Model& other) {
      return &other != &model && !other.removed && !other.retire_when_replaced &&
             other.config.name == model.config.name && HasReadyWorker(other);
    });
    if (!replaced) continue;
    TF_LOG(kInfo) << "another version is ready; removing the version a reload dropped"
                  << Kv("model", model.config.name) << Kv("version", model.config.version)
                  << Kv("queued", model.queue.size());
    model.removed = true;
    model.retire_when_replaced = false;
    changed = true;
  }
  if (changed) RebuildServedModels();
}

}  // namespace torchfarm
