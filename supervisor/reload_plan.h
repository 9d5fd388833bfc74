// A config reload as a pure diff: what the running farm must do to become the fresh config
// (models to add, update or remove; which workers a change forces to be replaced; which keys only
// a restart applies). No processes, no sockets: unit-tested on plain configs. The Supervisor
// applies the plan (supervisor_control.cc) on its loop thread.
#pragma once

#include <string>
#include <vector>

#include "common/config.h"

namespace torchfarm {

struct ModelUpdate {
  ModelConfig config;                     // the fresh one
  bool replace_workers = false;           // a change no running worker can pick up
  // ...and one the old workers must not serve through while they are replaced (ring geometry,
  // inputs: a batch sized for the new slot_bytes would overrun an old ring's slot). Such workers
  // all stop taking batches at once; other replacements roll one worker at a time.
  bool replace_at_once = false;
  std::vector<InstanceConfig> instances;  // one per worker the fresh config wants
};

// Models are matched by (name, version): a new version of a model is added, a version the fresh
// config no longer loads is removed, like whole models.
struct ReloadPlan {
  std::vector<ModelConfig> added;
  std::vector<ModelUpdate> updated;    // models in both configs
  std::vector<ModelConfig> removed;    // served now, absent from the fresh config (served config)
  std::vector<std::string> needs_restart;  // keys whose change only a restart applies
};

// `served` are the models the farm serves now (removed ones excluded).
ReloadPlan PlanReload(const FarmConfig& running, const std::vector<ModelConfig>& served,
                      const FarmConfig& fresh, int available_cores);

// One InstanceConfig per worker, in the order the config lists them.
std::vector<InstanceConfig> ExpandInstances(const ModelConfig& model, int available_cores);
// Whether a worker launched with `current` must be replaced to run `wanted` under `update`.
bool WorkerNeedsReplacing(const ModelUpdate& update, const InstanceConfig& current,
                          const InstanceConfig& wanted);

}  // namespace torchfarm
