// The farm's resource limits (docs/operations.md, "Limits"): the job socket's max_connections
// (given, or derived from the descriptor limit and the workers the config asks for) applied to the
// accept guard, and the shared-memory cap (limits.max_shm_bytes, by default the size of /dev/shm)
// applied to the budget every segment and client region reserves from. Applied at start and after
// a reload; Report() is what stats "resources" and the resource metrics show.
//
// Owns nothing: configures the process's AcceptGuard and the supervisor's ShmBudget. Loop thread.
#pragma once

#include "common/config.h"
#include "supervisor/admin/resource_metrics.h"
#include "supervisor/intake/shm_budget.h"
#include "supervisor/security/connection_monitor.h"

namespace torchfarm {

class ResourceLimits {
 public:
  ResourceLimits(ShmBudget& shm_budget, const ConnectionMonitor& connections)
      : shm_budget_(shm_budget), connections_(connections) {}

  void Apply(const FarmConfig& config);
  ResourceReport Report() const;

 private:
  ShmBudget& shm_budget_;
  const ConnectionMonitor& connections_;
};

}  // namespace torchfarm
