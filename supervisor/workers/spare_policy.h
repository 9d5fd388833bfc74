// Warm spares as a pure decision: which ready spare takes the place of which serving worker.
//
// A model's workers are split in two lists (served_model.h): `slots` serve (the dispatcher sends
// batches only to them; `count` per instance group) and `spares` (`instances[].spares` per group)
// are started, loaded and warmed up but get no traffic. When a serving worker has no process that
// can serve (its process died and it is backing off or failed, or it is still starting), a ready
// spare of the same instance group swaps roles with it: the spare serves at once, through the
// segment and doorbells it already has, and the dead slot, restarted in the background by the
// restart policy, becomes a spare once it is ready. No processes here: unit-tested on plain views.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/config.h"
#include "supervisor/workers/worker_slot.h"

namespace torchfarm {

// What the policy needs to know of one slot.
struct SpareSlotView {
  SlotState state = SlotState::kStopped;
  bool retiring = false;           // scaled down, unloaded or replaced: never swapped
  bool restart_requested = false;  // a graceful restart (reload, admin) is under way
  bool first_start = false;        // starting for the first time: nobody lost, nothing to swap
  std::string group;               // InstanceGroupKey of the slot's instance
};

// Positions in the model's `slots` and `spares` lists that swap roles.
struct SparePromotion {
  size_t serving = 0;
  size_t spare = 0;
};

// Which spares to promote now: every serving slot that cannot serve (kBackoff, kFailed, or
// kStarting again after a process of it died) and is not winding down gets a ready spare of its group, each spare at most once,
// serving slots in list order.
std::vector<SparePromotion> PlanSparePromotions(const std::vector<SpareSlotView>& serving,
                                                const std::vector<SpareSlotView>& spares);

// Instances that may stand in for each other: every launch setting equal (as SameInstance in
// reload_plan.h), count and spares aside.
std::string InstanceGroupKey(const InstanceConfig& instance);

// One InstanceConfig per spare the model's config asks for, in config order.
std::vector<InstanceConfig> ExpandSpares(const ModelConfig& model);

}  // namespace torchfarm
