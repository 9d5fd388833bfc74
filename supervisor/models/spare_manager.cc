#include "supervisor/models/spare_manager.h"

#include <algorithm>

#include "common/log.h"
#include "supervisor/workers/spare_policy.h"

namespace torchfarm {

namespace {

SpareSlotView ViewOf(const WorkerSlot& slot) {
  return {slot.state(), slot.retiring(), slot.restart_requested(), slot.generation() <= 0,
          InstanceGroupKey(slot.instance())};
}

}  // namespace

void SpareManager::Add(size_t index) {
  ServedModel& model = models_[index];
  for (const InstanceConfig& instance : ExpandSpares(model.config)) {
    const size_t slot = workers_.Add(model.config, instance, index);
    workers_[slot]->set_spare(true);
    model.spares.push_back(slot);
  }
}

void SpareManager::Promote(ServedModel& model, std::optional<TimePoint> death) {
  if (model.spares.empty() || IsStoppingWorkers(farm_.phase) || model.removed ||
      model.rollout.state == RolloutState::kRolling) {
    return;  // a rollout owns its slots' roles until it is over
  }
  std::vector<SpareSlotView> serving, spares;
  for (size_t i : model.slots) serving.push_back(ViewOf(*workers_[i]));
  for (size_t i : model.spares) spares.push_back(ViewOf(*workers_[i]));
  for (const SparePromotion& p : PlanSparePromotions(serving, spares)) {
    WorkerSlot& replaced = *workers_[model.slots[p.serving]];
    WorkerSlot& spare = *workers_[model.spares[p.spare]];
    std::swap(model.slots[p.serving], model.spares[p.spare]);
    spare.Promote(death);
    replaced.set_spare(true);
    ++model.spare_promotions;
    if (metrics_) metrics_->SparePromoted(model.config.name, model.config.version);
    if (events_) {
      events_->Add(
          "promotion",
          "spare worker " + std::to_string(spare.id()) + " (pid " + std::to_string(spare.pid()) +
              ") took worker " + std::to_string(replaced.id()) +
              "'s place: " + (replaced.last_exit().empty() ? "not ready" : replaced.last_exit()),
          model.config.name, spare.id());
    }
    TF_LOG(kInfo) << "spare promoted" << Kv("worker", spare.id()) << Kv("pid", spare.pid())
                  << Kv("model", model.config.name) << Kv("replaces", replaced.id())
                  << Kv("replaced_state", SlotStateName(replaced.state()))
                  << Kv("why", replaced.last_exit().empty() ? "not ready" : replaced.last_exit());
  }
}

void SpareManager::Replace(ServedModel& model, const std::string& why) {
  Retire(model, why);
  const size_t first_new = workers_.size();
  Add(models_.IndexOf(model));
  for (size_t i = first_new; i < workers_.size(); ++i) workers_.Launch(*workers_[i]);
}

void SpareManager::Reconcile(ServedModel& model, const ModelConfig& previous,
                             const ModelUpdate& update) {
  const std::vector<InstanceConfig> before = ExpandSpares(previous);
  const std::vector<InstanceConfig> after = ExpandSpares(model.config);
  bool same = !update.replace_workers;
  for (size_t k = 0; same && k < std::min(before.size(), after.size()); ++k) {
    same = SameInstance(before[k], after[k]);
  }
  if (!same) {
    Replace(model, "config reloaded: spares follow the new config");
    return;
  }
  // Only the number changed (or nothing a worker runs with): the warm spares stay; the youngest
  // go, or new ones start.
  size_t k = 0;
  for (size_t i : model.spares) {
    if (workers_[i]->retiring()) continue;
    if (k < after.size()) {
      workers_[i]->UpdateConfig(model.config, after[k]);
    } else {
      WorkerPool::Retire(*workers_[i], "config reloaded: fewer spares");
    }
    ++k;
  }
  for (; k < after.size(); ++k) {
    const size_t slot = workers_.Add(model.config, after[k], models_.IndexOf(model));
    workers_[slot]->set_spare(true);
    model.spares.push_back(slot);
    workers_.Launch(*workers_[slot]);
  }
}

void SpareManager::Retire(ServedModel& model, const std::string& why) {
  for (size_t i : model.spares) {
    if (!workers_[i]->retiring()) WorkerPool::Retire(*workers_[i], why);
  }
}

}  // namespace torchfarm
