#include "supervisor/workers/spare_policy.h"

namespace torchfarm {

namespace {

bool CannotServe(const SpareSlotView& slot) {
  if (slot.retiring || slot.restart_requested) return false;
  return slot.state == SlotState::kBackoff || slot.state == SlotState::kFailed ||
         (slot.state == SlotState::kStarting && !slot.first_start);
}

bool ReadyToStandIn(const SpareSlotView& spare) {
  return spare.state == SlotState::kReady && !spare.retiring && !spare.restart_requested;
}

}  // namespace

std::vector<SparePromotion> PlanSparePromotions(const std::vector<SpareSlotView>& serving,
                                                const std::vector<SpareSlotView>& spares) {
  std::vector<SparePromotion> out;
  std::vector<bool> taken(spares.size(), false);
  for (size_t s = 0; s < serving.size(); ++s) {
    if (!CannotServe(serving[s])) continue;
    for (size_t p = 0; p < spares.size(); ++p) {
      if (taken[p] || !ReadyToStandIn(spares[p]) || spares[p].group != serving[s].group) continue;
      taken[p] = true;
      out.push_back({s, p});
      break;
    }
  }
  return out;
}

std::string InstanceGroupKey(const InstanceConfig& i) {
  // Every launch setting SameInstance (reload_plan.h) compares, so a spare only stands in for a
  // worker it is interchangeable with.
  std::string key = i.device + "/t" + std::to_string(i.threads) + "/" + i.precision + "/s" +
                    std::to_string(i.streams) + "/" + i.fallback + std::to_string(i.gpu_failures_before_fallback) +
                    "/p" + std::to_string(i.pin_memory) + std::to_string(i.cudnn_benchmark) + "/w" +
                    std::to_string(i.idle_spin_us) + "/c";
  for (int core : i.cores) key += std::to_string(core) + ",";
  return key;
}

std::vector<InstanceConfig> ExpandSpares(const ModelConfig& model) {
  std::vector<InstanceConfig> out;
  for (const InstanceConfig& instance : model.instances) {
    for (int i = 0; i < instance.spares; ++i) out.push_back(instance);
  }
  return out;
}

}  // namespace torchfarm
