// Rolling replacement after a reload (config rollout: max_surge, max_unavailable): starts workers
// with the new config, retires an outdated worker once a replacement is ready, and rolls back
// when a replacement does not start (the old workers never stopped serving). What to do at each
// turn is RolloutStep's call (rollout_policy.h, pure); this class reads the slots into a
// RolloutView and carries the decision out.
//
// Owns the rollout ids; each model's rollout state is its ServedModel's. Loop thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "supervisor/admin/metrics_exporter.h"
#include "supervisor/models/model_table.h"
#include "supervisor/models/rollout_policy.h"
#include "supervisor/models/spare_manager.h"
#include "supervisor/workers/worker_pool.h"

namespace torchfarm {

class RolloutController {
 public:
  RolloutController(ModelTable& models, WorkerPool& workers, SpareManager& spares,
                    const TimeSource& clock)
      : models_(models), workers_(workers), spares_(spares), clock_(clock) {}
  void set_metrics(MetricsExporter* metrics) { metrics_ = metrics; }
  void set_events(EventRing* events) { events_ = events; }

  // Starts replacing `outdated` (slot indices of `model`) by workers with `replacements`'
  // instances; `previous_*` is what a rollback restores, `ready_before` the ready workers the
  // model had before the reload (max_unavailable counts from it).
  void Start(ServedModel& model, std::vector<size_t> outdated,
             std::vector<InstanceConfig> replacements, const ModelConfig& previous_config,
             const FileIdentity& previous_file, int ready_before);
  // One step of every rolling model (each loop turn, not while workers stop).
  void AdvanceAll();
  // The id the next rollout gets: a reload reports the rollouts it started (id >= this).
  uint64_t next_id() const { return next_id_; }

 private:
  void Advance(ServedModel& model);
  RolloutView ViewOf(ServedModel& model);
  void Finish(ServedModel& model, RolloutState outcome, const std::string& reason);

  ModelTable& models_;
  WorkerPool& workers_;
  SpareManager& spares_;
  const TimeSource& clock_;
  MetricsExporter* metrics_ = nullptr;
  EventRing* events_ = nullptr;
  uint64_t next_id_ = 1;
};

}  // namespace torchfarm
