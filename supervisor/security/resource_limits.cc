#include "supervisor/security/resource_limits.h"

#include <cstdint>
#include <limits>

#include "common/log.h"
#include "supervisor/admin/process_stats.h"
#include "supervisor/loop/resource_errors.h"
#include "supervisor/models/reload_plan.h"
#include "supervisor/security/accept_guard.h"
#include "supervisor/security/descriptor_limit.h"

namespace torchfarm {

void ResourceLimits::Apply(const FarmConfig& config) {
  const int64_t descriptor_limit = CurrentDescriptorLimit();
  int64_t workers = 0;
  for (const ModelConfig& m : config.models) {
    workers += static_cast<int64_t>(ExpandInstances(m, AvailableCores()).size());
  }
  const int64_t derived = DefaultMaxConnections(descriptor_limit, workers, config);
  const int64_t max_connections = config.max_connections > 0 ? config.max_connections : derived;
  if (config.max_connections > derived) {
    TF_LOG(kWarn) << "max_connections is more than the descriptor limit leaves for clients; the "
                     "descriptor reserve refuses connections before it is reached (raise "
                     "LimitNOFILE=)"
                  << Kv("max_connections", max_connections) << Kv("derived", derived)
                  << Kv("descriptor_limit", descriptor_limit);
  }
  AcceptGuard::Instance().Configure(descriptor_limit, max_connections);
  // By default the tmpfs itself: past it, touching a page of a segment raises SIGBUS.
  const uint64_t shm_limit =
      config.limits.max_shm_bytes > 0
          ? config.limits.max_shm_bytes
          : ShmBudget::FilesystemBytes("/dev/shm", std::numeric_limits<uint64_t>::max());
  shm_budget_.set_limit(shm_limit);
  TF_LOG(kInfo) << "resource limits" << Kv("descriptor_limit", descriptor_limit)
                << Kv("max_connections", max_connections)
                << Kv("max_connections_source", config.max_connections > 0 ? "config" : "derived")
                << Kv("max_shm_bytes", shm_limit)
                << Kv("accepts_guarded", AcceptGuard::Instance().interposed());
}

ResourceReport ResourceLimits::Report() const {
  const AcceptGuard& guard = AcceptGuard::Instance();
  ResourceReport r;
  r.descriptor_limit = guard.descriptor_limit();
  r.open_descriptors = OpenDescriptors();
  r.job_connections = connections_.open();
  r.max_connections = guard.max_connections();
  r.refused_max_connections = connections_.refused();
  r.refused_descriptor_reserve = guard.refused_reserve();
  r.shm_bytes = shm_budget_.used();
  r.shm_limit_bytes = shm_budget_.limit();
  r.shm_refused = shm_budget_.refused();
  r.errors = ResourceErrors::Instance().counts();
  if (guard.accept_exhausted() > 0) r.errors["accept"] = guard.accept_exhausted();
  return r;
}

}  // namespace torchfarm
