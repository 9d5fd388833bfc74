#include "supervisor/admin/resource_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace torchfarm {

ResourceMetrics::ResourceMetrics(prometheus::Registry& registry)
    : descriptors_(&prometheus::BuildGauge()
                        .Name("torchfarm_descriptors")
                        .Help("Descriptors of the supervisor: open now, and the soft limit")
                        .Register(registry)),
      connections_(&prometheus::BuildGauge()
                        .Name("torchfarm_job_connections")
                        .Help("Connections of the job socket: open now, and max_connections")
                        .Register(registry)),
      refused_(&prometheus::BuildCounter()
                    .Name("torchfarm_connections_refused_total")
                    .Help("Connections closed as they were accepted: beyond max_connections (job "
                          "socket), or inside the descriptor reserve (any TCP listener)")
                    .Register(registry)),
      shm_bytes_(&prometheus::BuildGauge()
                      .Name("torchfarm_shm_bytes")
                      .Help("Shared memory the supervisor created: worker segments and client "
                            "regions")
                      .Register(registry)),
      shm_limit_(&prometheus::BuildGauge()
                      .Name("torchfarm_shm_limit_bytes")
                      .Help("The cap on torchfarm_shm_bytes (limits.max_shm_bytes)")
                      .Register(registry)),
      shm_refused_(&prometheus::BuildCounter()
                        .Name("torchfarm_shm_refused_total")
                        .Help("Worker segments and client regions refused for want of "
                              "limits.max_shm_bytes")
                        .Register(registry)),
      errors_(&prometheus::BuildCounter()
                   .Name("torchfarm_resource_errors_total")
                   .Help("Operations of the supervisor's loop that failed for want of "
                         "descriptors, processes or memory, by operation")
                   .Register(registry)) {}

void ResourceMetrics::Advance(prometheus::Counter& counter, uint64_t total, uint64_t* exported) {
  if (total > *exported) counter.Increment(static_cast<double>(total - *exported));
  *exported = total;
}

void ResourceMetrics::Export(const ResourceReport& r) {
  if (r.open_descriptors >= 0) {
    descriptors_->Add({{"kind", "open"}}).Set(static_cast<double>(r.open_descriptors));
  }
  descriptors_->Add({{"kind", "limit"}}).Set(static_cast<double>(r.descriptor_limit));
  connections_->Add({{"kind", "open"}}).Set(static_cast<double>(r.job_connections));
  connections_->Add({{"kind", "max"}}).Set(static_cast<double>(r.max_connections));
  Advance(refused_->Add({{"reason", "max_connections"}}), r.refused_max_connections,
          &exported_refused_max_);
  Advance(refused_->Add({{"reason", "descriptor_reserve"}}), r.refused_descriptor_reserve,
          &exported_refused_reserve_);
  shm_bytes_->Add({}).Set(static_cast<double>(r.shm_bytes));
  shm_limit_->Add({}).Set(static_cast<double>(r.shm_limit_bytes));
  Advance(shm_refused_->Add({}), r.shm_refused, &exported_shm_refused_);
  for (const auto& [operation, total] : r.errors) {
    Advance(errors_->Add({{"operation", operation}}), total, &exported_errors_[operation]);
  }
}

}  // namespace torchfarm
