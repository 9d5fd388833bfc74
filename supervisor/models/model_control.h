// Changing what the farm serves while it serves: load and unload at run time (the admin `load`,
// `unload` commands, in the spirit of Triton's model control API), scale, the models' part of a
// config reload (reload_plan.h decides, this class carries it out: added, updated in place,
// rolled, replaced at once, removed), retiring the slots of removed models once idle, and the
// versions a reload dropped once another is ready.
//
// Results are typed (ScaleResult, LoadResult, ...); the admin socket's JSON is made from them at
// the edge (admin/farm_status.h). Never writes the config file. Loop thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/config.h"
#include "common/status.h"
#include "supervisor/loop/farm_phase.h"
#include "supervisor/models/model_table.h"
#include "supervisor/models/reload_plan.h"
#include "supervisor/models/rollout_controller.h"
#include "supervisor/models/scale_result.h"
#include "supervisor/models/spare_manager.h"
#include "supervisor/workers/worker_pool.h"

namespace torchfarm {

struct LoadResult {
  Status status;  // not ok: nothing was loaded
  std::string model;
  size_t versions = 0;
  size_t workers = 0;  // slots started (serving and spares)
};

struct UnloadResult {
  Status status;
  std::string model;
  size_t queued = 0;   // requests that will still be served
  size_t workers = 0;  // that stop once idle
};

// The models' part of a reload.
struct ModelReloadReport {
  std::vector<std::string> notes;  // one line per model change, in the order applied
  // The models whose rollout this reload started, as they were when it started.
  std::vector<std::pair<std::string, ModelRollout>> rollouts;
};

class ModelControl {
 public:
  ModelControl(ModelTable& models, WorkerPool& workers, SpareManager& spares,
               RolloutController& rollouts, const FarmState& farm)
      : models_(models), workers_(workers), spares_(spares), rollouts_(rollouts), farm_(farm) {}

  // A model with its slots and spares, none launched (at start: the pool launches them).
  size_t Add(const ModelConfig& config, FileIdentity file);
  // Every version in `configs` (of one name), launched; refused when the name is loaded, the farm
  // drains or a model file cannot be read.
  LoadResult Load(const std::string& name, const std::vector<ModelConfig>& configs);
  // Every version of `name`: new requests get NOT_FOUND, queued ones are served, then its workers
  // stop.
  UnloadResult Unload(const std::string& name);
  // `version` empty: the default version. Checks the count's bound and refuses during a rollout.
  ScaleResult Scale(const std::string& name, int count, const std::string& version = {});
  // Applies a reload's plan for the models (`fresh` is the new config, already checked).
  ModelReloadReport Reload(const FarmConfig& running, const FarmConfig& fresh);
  // Each loop turn: removed models' slots retire once their queue is empty; retired slots that
  // stopped leave their model's lists.
  void RetireIdle();
  // Each loop turn, after RetireIdle: frees what unloaded and removed models held once nothing
  // refers to it any more: the model (its queue, stats, names) once it is idle and has no slots,
  // and every retired slot that stopped and no model lists (its segment went when its process
  // did). The survivors are renumbered. Returns how many models and slots went.
  size_t ReclaimRemoved();
  // Each loop turn: a model loaded over the admin socket whose every worker failed before one was
  // ready is unregistered (the farm's readiness stops waiting for it) and its failure kept for
  // `models` and `ctl load` (ModelTable::failed_loads).
  void DropFailedLoads();
  // Versions a reload dropped while another version of their model was still loading: removed
  // once one is ready. True when the served list changed.
  bool RetireReplacedVersions();
  // The config file and every served model's file: what watch mode stats.
  std::vector<std::string> WatchedPaths(const std::string& config_path) const;

 private:
  // Applies one model's part of a reload plan; `file` is the model file now. Returns what it did.
  std::string ApplyUpdate(const ModelUpdate& update, const FileIdentity& file);
  // Ring geometry or inputs changed: every worker stops taking batches and restarts at once.
  std::string ReplaceAllAtOnce(ServedModel& model, const ModelUpdate& update);
  void LaunchFrom(size_t first_slot);
  // Which slots ReclaimRemoved may erase (retired, stopped, in no model's lists) and which models
  // (removed, idle, with no slot left that is not erased).
  void FindReclaimable(std::vector<bool>* slot_gone, std::vector<bool>* model_gone) const;

  ModelTable& models_;
  WorkerPool& workers_;
  SpareManager& spares_;
  RolloutController& rollouts_;
  const FarmState& farm_;
};

}  // namespace torchfarm
