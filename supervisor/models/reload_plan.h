// A config reload as a pure diff: what the running farm must do to become the fresh config
// (models to add, update or remove; which workers a change forces to be replaced; which keys only
// a restart applies). No processes, no sockets: unit-tested on plain configs. The Supervisor
// applies the plan (model_control.h) on its loop thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "supervisor/models/file_identity.h"

namespace torchfarm {

struct ModelUpdate {
  ModelConfig config;                     // the fresh one
  bool replace_workers = false;           // a change no running worker can pick up
  bool file_changed = false;              // same path or not, the model file is another one
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

// Model files by ModelFiles::Key (name and version; file_identity.h): `served`, the files the
// running workers were planned with; `fresh`, the files the fresh config names, as they are now.
// A model missing from either map is judged by its path string alone.
struct ModelFiles {
  static std::string Key(const ModelConfig& model) { return model.name + '\n' + model.version; }
  std::map<std::string, FileIdentity> served;
  std::map<std::string, FileIdentity> fresh;
};

// The front-end settings a reload cannot apply (the front ends start once, with the supervisor):
// the config key of each one that differs between the running config and a fresh one
// ("http_endpoint", "frontend.client_id_header", ...), in the file's order. Empty: none.
std::vector<std::string> FrontendChangesNeedingRestart(const FrontendConfig& running,
                                                       const FrontendConfig& fresh);

// `served` are the models the farm serves now (removed ones excluded). A model whose file
// identity changed (rewritten in place under the same path) has its workers replaced.
ReloadPlan PlanReload(const FarmConfig& running, const std::vector<ModelConfig>& served,
                      const FarmConfig& fresh, int available_cores,
                      const ModelFiles& files = ModelFiles{});

// One InstanceConfig per worker, in the order the config lists them.
std::vector<InstanceConfig> ExpandInstances(const ModelConfig& model, int available_cores);
// Same worker process: every instance setting a worker is launched with (its argv) is equal
// (`count` and `spares` are not launch settings).
bool SameInstance(const InstanceConfig& a, const InstanceConfig& b);
// Whether a worker launched with `current` must be replaced to run `wanted` under `update`.
bool WorkerNeedsReplacing(const ModelUpdate& update, const InstanceConfig& current,
                          const InstanceConfig& wanted);

}  // namespace torchfarm
