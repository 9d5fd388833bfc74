// Prometheus series of the supervisor's resources and their limits (docs/operations.md, "Limits"):
//   torchfarm_descriptors{kind}                   gauge, kind = open|limit
//   torchfarm_job_connections{kind}               gauge, kind = open|max
//   torchfarm_connections_refused_total{reason}   counter, reason = max_connections|
//                                                 descriptor_reserve
//   torchfarm_shm_bytes / torchfarm_shm_limit_bytes  gauges: worker segments + client regions
//   torchfarm_shm_refused_total                   counter: launches and shm_create over the cap
//   torchfarm_resource_errors_total{operation}    counter: EMFILE, ENOMEM... per operation
//
// Owns: handles into the exporter's registry and the totals last exported (the sources keep
// totals; counters advance by the difference). Loop thread (Housekeeping, once a second).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace prometheus {
class Counter;
class Gauge;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace torchfarm {

struct ResourceReport {
  int64_t descriptor_limit = 0;
  int64_t open_descriptors = -1;  // -1: could not be counted
  int64_t job_connections = 0;
  int64_t max_connections = 0;
  uint64_t refused_max_connections = 0;
  uint64_t refused_descriptor_reserve = 0;
  uint64_t shm_bytes = 0;
  uint64_t shm_limit_bytes = 0;
  uint64_t shm_refused = 0;
  std::map<std::string, uint64_t> errors;  // by operation
};

class ResourceMetrics {
 public:
  explicit ResourceMetrics(prometheus::Registry& registry);
  void Export(const ResourceReport& report);

 private:
  void Advance(prometheus::Counter& counter, uint64_t total, uint64_t* exported);

  prometheus::Family<prometheus::Gauge>* descriptors_;
  prometheus::Family<prometheus::Gauge>* connections_;
  prometheus::Family<prometheus::Counter>* refused_;
  prometheus::Family<prometheus::Gauge>* shm_bytes_;
  prometheus::Family<prometheus::Gauge>* shm_limit_;
  prometheus::Family<prometheus::Counter>* shm_refused_;
  prometheus::Family<prometheus::Counter>* errors_;
  uint64_t exported_refused_max_ = 0;
  uint64_t exported_refused_reserve_ = 0;
  uint64_t exported_shm_refused_ = 0;
  std::map<std::string, uint64_t> exported_errors_;
};

}  // namespace torchfarm
