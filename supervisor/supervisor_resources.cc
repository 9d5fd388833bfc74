// Supervisor, resource limits (docs/operations.md, "Limits"): max_connections of the job socket
// (given, or derived from the descriptor limit) and the shared-memory cap, applied at start and
// after a reload; what stats "resources" and the resource metrics report.
#include <cstdint>
#include <limits>

#include "common/log.h"
#include "supervisor/admin/process_stats.h"
#include "supervisor/models/reload_plan.h"
#include "supervisor/security/descriptor_limit.h"
#include "supervisor/supervisor.h"

namespace torchfarm {

using nlohmann::json;

void Supervisor::ApplyResourceLimits() {
  const int64_t descriptor_limit = CurrentDescriptorLimit();
  int64_t workers = 0;
  for (const ModelConfig& m : config_.models) {
    workers += static_cast<int64_t>(ExpandInstances(m, AvailableCores()).size());
  }
  const int64_t derived = DefaultMaxConnections(descriptor_limit, workers, config_);
  const int64_t max_connections = config_.max_connections > 0 ? config_.max_connections : derived;
  if (config_.max_connections > derived) {
    TF_LOG(kWarn) << "max_connections is more than the descriptor limit leaves for clients; the "
                     "descriptor reserve refuses connections before it is reached (raise "
                     "LimitNOFILE=)"
                  << Kv("max_connections", max_connections) << Kv("derived", derived)
                  << Kv("descriptor_limit", descriptor_limit);
  }
  AcceptGuard::Instance().Configure(descriptor_limit, max_connections);
  // By default the tmpfs itself: past it, touching a page of a segment raises SIGBUS.
  const uint64_t shm_limit =
      config_.limits.max_shm_bytes > 0
          ? config_.limits.max_shm_bytes
          : ShmBudget::FilesystemBytes("/dev/shm", std::numeric_limits<uint64_t>::max());
  shm_budget_.set_limit(shm_limit);
  TF_LOG(kInfo) << "resource limits" << Kv("descriptor_limit", descriptor_limit)
                << Kv("max_connections", max_connections)
                << Kv("max_connections_source", config_.max_connections > 0 ? "config" : "derived")
                << Kv("max_shm_bytes", shm_limit)
                << Kv("accepts_guarded", AcceptGuard::Instance().interposed());
}

ResourceReport Supervisor::Resources() const {
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

json Supervisor::ResourcesJson() const {
  const ResourceReport r = Resources();
  json errors = json::object();
  for (const auto& [operation, n] : r.errors) errors[operation] = n;
  return {{"descriptor_limit", r.descriptor_limit},
          {"open_descriptors", r.open_descriptors >= 0 ? json(r.open_descriptors) : json(nullptr)},
          {"job_connections", r.job_connections},
          {"max_connections", r.max_connections},
          {"refused_connections", r.refused_max_connections},
          {"refused_descriptor_reserve", r.refused_descriptor_reserve},
          {"accepts_guarded", AcceptGuard::Instance().interposed()},
          {"shm_bytes", r.shm_bytes},
          {"shm_limit_bytes", r.shm_limit_bytes},
          {"shm_refused", r.shm_refused},
          {"errors", errors}};
}

}  // namespace torchfarm
