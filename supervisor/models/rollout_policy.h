// The rolling replacement of a model's workers after a reload, as a pure step function in the
// manner of a Kubernetes Deployment's rolling update: from what the slots look like now, decide
// which replacements to launch, which outdated workers to retire, and whether the rollout is done
// or must roll back. No processes, no clock: unit-tested on plain views. The Supervisor calls it
// on its loop thread once per loop turn for each model with a rollout (rollout_controller.h).
//
// Rules, with desired = untouched + outdated workers when the rollout began:
//   - workers alive (untouched + outdated + retired ones whose process has not exited yet + new)
//     never exceed desired + max_surge: a retired process still holds its memory;
//   - an outdated worker is retired only when, counting it gone, the ready workers stay at or above
//     min_ready (the ready count before the reload less max_unavailable), and no more outdated
//     workers have been retired than replacements are ready plus max_unavailable;
//     outdated workers that are not ready (crashed, restarting) go first: they cost no capacity;
//   - a replacement that exits before it was ever ready rolls the whole rollout back;
//   - done once every outdated worker is retired and every replacement is ready.
#pragma once

#include <string>
#include <vector>

#include "common/config.h"

namespace torchfarm {

struct RolloutView {
  RolloutConfig limits;  // the model's config "rollout" (max_surge, max_unavailable)
  int desired = 0;           // workers the model runs when the rollout is over
  int min_ready = 0;         // ready workers below which nothing is retired
  int untouched_alive = 0;   // workers the reload does not replace, with or without a process
  int untouched_ready = 0;
  std::vector<bool> outdated_ready;  // per outdated worker not retired yet: ready now
  int retired = 0;           // outdated workers retired so far
  int retired_alive = 0;     // ... whose process has not exited yet
  int not_launched = 0;      // replacements still to launch
  struct Replacement {
    bool ready = false;
    bool failed_start = false;  // exited (or reported a fatal error) before it was ever ready
    std::string reason;
  };
  std::vector<Replacement> replacements;  // launched, not retired
};

struct RolloutDecision {
  int launch = 0;                 // replacements to launch now
  std::vector<size_t> retire;     // indices into RolloutView::outdated_ready
  bool done = false;
  bool roll_back = false;
  std::string reason;             // why rolled back
};

RolloutDecision RolloutStep(const RolloutView& view);

}  // namespace torchfarm
