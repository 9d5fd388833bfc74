// One model as the supervisor serves it: its config, the queue of its accepted requests, its
// counters, the worker slots that run it and the measured cost of its batches. Plain state, owned
// by the ModelTable (one per model, in config order, never erased: a reload marks a dropped
// model `removed`); the Dispatcher, the admin service and reload work on it. Loop thread only.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "supervisor/dispatch/dispatch_planner.h"
#include "supervisor/dispatch/model_queue.h"
#include "supervisor/dispatch/model_stats.h"
#include "supervisor/dispatch/slo_margin.h"
#include "supervisor/models/file_identity.h"
#include "supervisor/models/model_rollout.h"

namespace torchfarm {

struct ServedModel {
  ModelConfig config;
  ModelQueue queue;
  ModelStats stats;
  std::vector<size_t> slots;  // indices into the WorkerPool (retired slots are removed)
  bool removed = false;       // dropped by a reload: serves its queue, accepts nothing new
  BatchCostModel cost;        // a batch's compute time against its rows (dispatch_planner.h)
  // A batch's service time against its rows: from when its worker could start it (dispatched,
  // or the worker's previous answer if later) to its answer, so the supervisor's and the ring's
  // work per batch count too. What the latency objective plans with (Dispatcher::SloCostOf).
  BatchCostModel service{};
  // How far the latency objective distrusts `service`, from the answers that missed anyway
  // (slo_margin.h); Dispatcher::SloCostOf scales the cost by it.
  SloMargin slo_margin{};
  // The model file as it was when the workers running `config` were planned (file_identity.h):
  // a reload compares it with the file now to notice a file rewritten in place.
  FileIdentity file{};
  // The last rolling replacement of its workers (model_rollout.h).
  ModelRollout rollout{};
  // What the model returns, as learned from a worker's warm-up report or the first batch answered
  // (model_metadata.h, LearnOutputs); dim 0 is -1 when the model batches. Learned for the model
  // file at `outputs_learned_for` (empty: not yet); a reload to another path learns anew.
  std::vector<TensorSpec> learned_outputs{};
  std::string outputs_learned_for{};
  // Dropped by a reload while a newer version of the same name was not loaded yet: still served
  // (pinned requests, and unpinned ones while it is the latest loaded) until another version of
  // its name has a ready worker; then `removed` (ModelControl::RetireReplacedVersions).
  bool retire_when_replaced = false;
  // Warm standby workers (spare_policy.h): indices into the WorkerPool, sent no batches. A
  // promotion swaps an entry of `slots` with one of `spares`.
  std::vector<size_t> spares{};
  uint64_t spare_promotions{0};
  // Loaded over the admin socket and no worker ready yet: if every worker fails first, the load
  // failed and the model is unregistered (ModelControl::DropFailedLoads).
  bool load_pending = false;
};

}  // namespace torchfarm
