// One model's rolling replacement after a reload: which workers are outdated, which replace them,
// and how it ended. Plain state, one per ServedModel, driven by the Supervisor on its loop thread
// (rollout_controller.h) with the pure RolloutStep (rollout_policy.h) deciding each move.
//
//   kNone --reload replaces workers--> kRolling --every replacement ready, old ones retired-->
//   kDone
//                                         |
//                                         +--a replacement exits before ready--> kFailed
//   (kDone and kFailed stay until the next rollout of the model, for stats and `ctl reload`.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "supervisor/models/file_identity.h"

namespace torchfarm {

enum class RolloutState { kNone, kRolling, kDone, kFailed };
inline const char* RolloutStateName(RolloutState state) {
  switch (state) {
    case RolloutState::kNone: return "none";
    case RolloutState::kRolling: return "rolling";
    case RolloutState::kDone: return "done";
    case RolloutState::kFailed: return "failed";
  }
  return "unknown";
}

struct ModelRollout {
  uint64_t id = 0;  // unique in this supervisor; the `reload` answer names it
  RolloutState state = RolloutState::kNone;
  int total = 0;     // outdated workers when it began
  std::string reason;  // why it failed
  int64_t started_ms = 0;   // wall clock, ms since the epoch
  int64_t finished_ms = 0;  // 0 while rolling
  int desired = 0;      // workers when it is over
  int min_ready = 0;    // ready workers it never goes below
  int workers_before = 0;
  // Indices into the WorkerPool.
  std::vector<size_t> outdated;      // old config, not retired yet
  std::vector<size_t> retired;       // outdated and retired (their process may still be exiting)
  std::vector<size_t> replacements;  // launched with the new config
  std::vector<int> launch_generation;   // per replacement: the generation it was launched as
  std::vector<bool> replacement_ready;  // per replacement: ready at least once
  std::vector<InstanceConfig> not_launched;  // instances of the replacements still to launch
  // Restored by a rollback: the outdated workers keep running these.
  ModelConfig previous_config;
  FileIdentity previous_file;

  int replaced() const { return static_cast<int>(retired.size()); }
};

}  // namespace torchfarm
