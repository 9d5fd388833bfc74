#include "supervisor/models/rollout_policy.h"

#include <algorithm>

namespace torchfarm {

RolloutDecision RolloutStep(const RolloutView& view) {
  RolloutDecision decision;
  for (const auto& replacement : view.replacements) {
    if (replacement.failed_start) {
      decision.roll_back = true;
      decision.reason = replacement.reason;
      return decision;
    }
  }
  int new_ready = 0;
  for (const auto& replacement : view.replacements) new_ready += replacement.ready;
  int outdated_ready = 0;
  for (bool ready : view.outdated_ready) outdated_ready += ready;
  int ready = view.untouched_ready + outdated_ready + new_ready;

  // Retire: the outdated workers that are not ready first, then ready ones while capacity allows.
  std::vector<size_t> order;
  for (size_t i = 0; i < view.outdated_ready.size(); ++i) {
    if (!view.outdated_ready[i]) order.push_back(i);
  }
  for (size_t i = 0; i < view.outdated_ready.size(); ++i) {
    if (view.outdated_ready[i]) order.push_back(i);
  }
  int retired = view.retired;
  int retired_alive = view.retired_alive;
  for (size_t i : order) {
    if (retired + 1 > new_ready + view.limits.max_unavailable) break;
    const int ready_after = ready - (view.outdated_ready[i] ? 1 : 0);
    if (ready_after < view.min_ready) break;
    decision.retire.push_back(i);
    ready = ready_after;
    ++retired;
    ++retired_alive;
  }

  // Launch: as many replacements as the surge ceiling leaves room for.
  const int outdated_left = static_cast<int>(view.outdated_ready.size() - decision.retire.size());
  const int alive = view.untouched_alive + outdated_left + retired_alive +
                    static_cast<int>(view.replacements.size());
  const int room = view.desired + view.limits.max_surge - alive;
  decision.launch = std::max(0, std::min(room, view.not_launched));

  decision.done = outdated_left == 0 && view.not_launched == 0 &&
                  new_ready == static_cast<int>(view.replacements.size());
  return decision;
}

}  // namespace torchfarm
