// Every model the farm has and which of them clients may name: the table of ServedModels (one per
// (name, version), in load order; a dropped model is marked `removed` and keeps serving its queue,
// and is erased once idle and without workers, ModelControl::ReclaimRemoved), the served list that
// routing reads (ParseJob, SelectServedVersion), the one count of a model's workers that every
// reader uses, and the loads over the admin socket that failed (reported by `models`).
//
// Owns the models; the WorkerPool owns their slots (a model holds slot indices). Loop thread only.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/config.h"
#include "common/status.h"
#include "supervisor/models/file_identity.h"
#include "supervisor/models/scale_result.h"
#include "supervisor/models/served_model.h"
#include "supervisor/workers/worker_pool.h"

namespace torchfarm {

// A model's workers as every reader counts them (health, stats, models, rollouts, scale).
struct ModelWorkerTally {
  int ready = 0;               // serving slots in kReady
  int live = 0;                // serving slots not retiring (what scale and rollouts count)
  int starting = 0;            // not ready, but may serve soon (starting, restarting)
  int spares_ready = 0;        // warm spares in kReady, not retiring
  std::string failure_reason;  // the last failure a serving slot reported, empty if none
};

// "a, b, c" of the models' names, "none" when there are none (what error messages list).
std::string ModelNames(const std::vector<ModelConfig>& models);

class ModelTable {
 public:
  ModelTable(WorkerPool& workers, const TimeSource& clock) : workers_(workers), clock_(clock) {}
  ModelTable(const ModelTable&) = delete;
  ModelTable& operator=(const ModelTable&) = delete;

  // The Dispatcher's view (it indexes models by slot.model_index()).
  std::vector<ServedModel>& models() { return models_; }
  const std::vector<ServedModel>& models() const { return models_; }
  ServedModel& operator[](size_t index) { return models_[index]; }
  const ServedModel& operator[](size_t index) const { return models_[index]; }
  size_t size() const { return models_.size(); }
  std::vector<ServedModel>::iterator begin() { return models_.begin(); }
  std::vector<ServedModel>::iterator end() { return models_.end(); }
  std::vector<ServedModel>::const_iterator begin() const { return models_.begin(); }
  std::vector<ServedModel>::const_iterator end() const { return models_.end(); }
  size_t IndexOf(const ServedModel& model) const {
    return static_cast<size_t>(&model - models_.data());
  }

  // Adds a model and one serving slot per instance (none launched); returns its index. Call
  // RebuildServed() once the models of one change are in.
  size_t Add(const ModelConfig& config, FileIdentity file);
  // Adds one serving slot (not launched) to model `index`; returns the slot's pool index.
  size_t AddSlot(size_t index, const InstanceConfig& instance);
  // Keeps a model's live serving workers at `count`: new slots launched (the config's instance
  // entries in order, then the last), the youngest retired first. No checks: ModelControl::Scale
  // has them.
  ScaleResult ScaleTo(ServedModel& model, int count);

  // The served (name, version), or with an empty `version` the default one (the latest loaded,
  // common/model_versions.h); null if none.
  ServedModel* Find(const std::string& name, const std::string& version = {});
  const std::vector<ModelConfig>& served_configs() const { return served_configs_; }
  // served_configs()[i] is models()[served_index()[i]].
  const std::vector<size_t>& served_index() const { return served_index_; }
  // Whether served_configs()[served] has a ready worker: what "latest loaded" means in routing.
  bool ServedVersionLoaded(size_t served) const;
  // The versions of `name` clients may name, ascending.
  std::vector<std::string> ServedVersions(const std::string& name) const;
  // Which version a request for `name` without a version runs on, or empty when none is loaded.
  std::string DefaultVersion(const std::string& name) const;
  // After a model was added or marked removed.
  void RebuildServed();
  // Erases the models with erase[m] and returns where each old index went (WorkerPool::kErased
  // for the erased); the caller renumbers the slots' model_index and calls RebuildServed.
  std::vector<size_t> EraseModels(const std::vector<bool>& erase);

  // A load over the admin socket whose every worker failed before one was ready: no longer a
  // model, kept for `models` and `ctl load` until the name is loaded again (at most
  // kFailedLoadsKept, the oldest dropped first).
  struct FailedLoad {
    std::string name;
    std::string version;
    std::string path;
    std::string reason;
  };
  static constexpr size_t kFailedLoadsKept = 32;
  void NoteFailedLoad(FailedLoad load);
  // Every failed load of `name` (of that version only, when given).
  void ForgetFailedLoads(const std::string& name, const std::string& version = {});
  const std::deque<FailedLoad>& failed_loads() const { return failed_loads_; }

  // A version is one set of bytes: whether `slot`'s next launch would load the file its version
  // was loaded from (ServedModel::file, or the rollout's previous_file for a worker still on the
  // old config). A stat first; only when size or mtime differ is the file hashed again. Not OK,
  // "model file changed since version N was loaded; reload to serve it (...)", when the bytes
  // differ. A file that cannot be read is the worker's to report.
  Status CheckModelFile(const WorkerSlot& slot) const;

  ModelWorkerTally Tally(const ServedModel& model) const;
  bool HasReadyWorker(const ServedModel& model) const;
  // Whether requests may wait for this model: a worker serves or may soon (a restarting one), or
  // a spare could stand in for a serving place (not during a rollout).
  bool Available(const ServedModel& model) const;
  // For a NOT_FOUND of ParseJob: true (and the message to answer) when it names a model being
  // unloaded.
  bool BeingUnloaded(const Status& not_found, std::string* message) const;

 private:
  // SelectServedVersion with "loaded" meaning a ready worker: the index into served_configs_.
  bool SelectServed(const std::string& name, const std::string& version, size_t* served) const;

  WorkerPool& workers_;
  const TimeSource& clock_;
  std::vector<ServedModel> models_;
  std::vector<ModelConfig> served_configs_;
  std::vector<size_t> served_index_;
  std::deque<FailedLoad> failed_loads_;
};

}  // namespace torchfarm
