// Warm spares (config spares, policy in workers/spare_policy.h): starts a model's spares, swaps a
// ready spare into the place of a serving worker that cannot serve (so the batches a dead worker
// held go to a warm process at once), and keeps the spares in step with reloads, rollbacks,
// unloads and removals.
//
// Reads the farm's phase (no promotion while workers stop) and owns nothing but the promotion
// count; the models' `spares` lists are the ModelTable's. Loop thread only.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "common/clock.h"
#include "supervisor/admin/metrics_exporter.h"
#include "supervisor/loop/farm_phase.h"
#include "supervisor/models/model_table.h"
#include "supervisor/models/reload_plan.h"
#include "supervisor/workers/worker_pool.h"

namespace torchfarm {

class SpareManager {
 public:
  SpareManager(ModelTable& models, WorkerPool& workers, const FarmState& farm)
      : models_(models), workers_(workers), farm_(farm) {}
  void set_metrics(MetricsExporter* metrics) { metrics_ = metrics; }
  void set_events(EventRing* events) { events_ = events; }

  // Adds model `index`'s spares as its config asks (not launched).
  void Add(size_t index);
  // Swaps ready spares into the places of serving workers that cannot serve. `death` (the SIGCHLD
  // of the worker replaced) starts the hand-over measure; none for a spare that just got ready.
  // Nothing while workers stop, for a removed model or during a rollout (it owns the roles).
  void Promote(ServedModel& model, std::optional<TimePoint> death);
  // Retires the model's spares and starts (launches) new ones with its current config.
  void Replace(ServedModel& model, const std::string& why);
  void Retire(ServedModel& model, const std::string& why);
  // After a reload changed `model` from `previous`: spares whose launch settings changed are
  // replaced; when only their number changed the warm ones stay (the youngest go, or new start).
  void Reconcile(ServedModel& model, const ModelConfig& previous, const ModelUpdate& update);

 private:
  ModelTable& models_;
  WorkerPool& workers_;
  const FarmState& farm_;
  MetricsExporter* metrics_ = nullptr;
  EventRing* events_ = nullptr;
};

}  // namespace torchfarm
