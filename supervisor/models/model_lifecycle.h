// A served model's lifecycle state as `ctl models` and the `models` admin command report it, from
// plain counts: no slots, no processes, unit-tested (tests/supervisor/model_lifecycle_test.cc).
//
//   load ------> loading --a worker ready--> available <--rollout over-- rolling
//                   |                            |
//                   +--every worker failed--> unavailable
//   unload (or a reload that drops it) --> unloading (queued and running requests finish,
//   then its workers stop; the entry disappears once they are gone)
//
// Pure; called on the supervisor's loop thread.
#pragma once

namespace torchfarm {

enum class ModelLifecycle { kLoading, kAvailable, kUnavailable, kUnloading, kRolling };

inline const char* ModelLifecycleName(ModelLifecycle state) {
  switch (state) {
    case ModelLifecycle::kLoading: return "loading";
    case ModelLifecycle::kAvailable: return "available";
    case ModelLifecycle::kUnavailable: return "unavailable";
    case ModelLifecycle::kUnloading: return "unloading";
    case ModelLifecycle::kRolling: return "rolling";
  }
  return "unknown";
}

struct ModelWorkerCounts {
  int ready = 0;     // serving now
  int starting = 0;  // not ready but will be soon: launching, loading, backing off to restart
};

// `removed`: unloaded or dropped by a reload; `rolling`: a rolling replacement is under way.
inline ModelLifecycle LifecycleOf(bool removed, bool rolling, const ModelWorkerCounts& workers) {
  if (removed) return ModelLifecycle::kUnloading;
  if (rolling) return ModelLifecycle::kRolling;
  if (workers.ready > 0) return ModelLifecycle::kAvailable;
  if (workers.starting > 0) return ModelLifecycle::kLoading;
  return ModelLifecycle::kUnavailable;
}

}  // namespace torchfarm
