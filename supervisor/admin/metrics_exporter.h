// Prometheus exposition of the farm on `metrics_endpoint` (e.g. "127.0.0.1:9464", path /metrics),
// through prometheus-cpp's pull exposer (its own civetweb HTTP threads). Off when the config has
// no metrics_endpoint.
//
// Owns: the registry, the exposer and cached handles to every metric, so recording on the
// request path is an atomic add (prometheus-cpp metrics are thread-safe; the exposer's threads
// read them while the supervisor's loop thread writes them).
//
// Metrics (names follow the Prometheus conventions):
// Every series of a model carries its `version` too (common/model_versions.h; "1" for a model
// that lists no versions).
//   torchfarm_requests_total{model,version,status,protocol}  counter, status = OK or an error
//                                                            code, protocol = zmq|http|grpc
//   torchfarm_request_duration_seconds{model,version,stage}  histogram, stage = queue|compute|total
//   torchfarm_batch_size{model,version}                      histogram of rows per batch
//   torchfarm_queue_depth{model,version}                     gauge
//   torchfarm_workers{model,version,state}                   gauge
//   torchfarm_worker_restarts_total{model,version}           counter
//   torchfarm_worker_protocol_violations_total{model,version}
//                                                            counter, workers killed for breaking
//                                                            the shared-memory layout
//                                                            (ipc/protocol_violation.h)
//   torchfarm_spare_promotions_total{model,version}          counter, warm spares that took a dead
//                                                            worker's place
//   torchfarm_workers{model,version,state="spare"}           gauge, ready spares
//   torchfarm_worker_rss_bytes{worker,model,version}         gauge
//   torchfarm_gpu_fallback{worker,model,version}             gauge, 1 when serving on CPU after a
//                                                            GPU failure
//   torchfarm_replies_undeliverable_total{reason}            counter, reason = gone|full: replies
//                                                            the job socket could not take
//   torchfarm_zygote_ready{role}                             gauge, 1 while that zygote (primary,
//                                                            standby) can fork workers
//   torchfarm_zygote_restarts_total{role}                    counter, zygote processes started
//                                                            again after one ended
//   torchfarm_zygote_launches_total{role}                    counter, workers forked
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "common/status.h"
#include "supervisor/intake/request_origin.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace torchfarm {

class MetricsExporter {
 public:
  // Binds the HTTP endpoint; errors name it.
  static Status Start(const std::string& endpoint, std::unique_ptr<MetricsExporter>* out);
  ~MetricsExporter();

  void RequestDone(const std::string& model, const std::string& version, StatusCode code,
                   RequestOrigin origin = RequestOrigin::kZmq);
  void Latency(const std::string& model, const std::string& version, double queue_s,
               double compute_s, double total_s);
  // A worker pipeline stage of an answered request ("decode", "preprocess", "postprocess"): the
  // same duration histogram as Latency, with that stage label.
  void PipelineStage(const std::string& model, const std::string& version, const char* stage,
                     double seconds);
  void Batch(const std::string& model, const std::string& version, int64_t rows);
  void QueueDepth(const std::string& model, const std::string& version, size_t depth);
  void Workers(const std::string& model, const std::string& version, const std::string& state,
               int count);
  void WorkerRestart(const std::string& model, const std::string& version);
  // A worker of the model was killed for a protocol violation (counted at its exit).
  void WorkerProtocolViolation(const std::string& model, const std::string& version);
  void SparePromoted(const std::string& model, const std::string& version);
  // A rolling replacement ended: `outcome` "done" or "failed".
  void Rollout(const std::string& model, const std::string& outcome);
  void WorkerRss(int worker, const std::string& model, const std::string& version, uint64_t bytes);
  void GpuFallback(int worker, const std::string& model, const std::string& version,
                   bool fallen_back);
  // What a GPU worker's heartbeat reported: caching-allocator bytes and the seconds its batches
  // spent in each stage (h2d, compute, d2h; sums over its current process).
  void WorkerGpuMemory(int worker, const std::string& model, const std::string& version,
                       int64_t allocated, int64_t reserved);
  void WorkerStageSeconds(int worker, const std::string& model, const std::string& version,
                          double h2d, double compute, double d2h);
  void MpsActive(bool active);
  // A reply the job socket could not take; `reason` "gone" (disconnected) or "full" (its pipe).
  void ReplyUndeliverable(const char* reason);
  // A zygote place's state and its counters so far (zygote_pool.h); the counters only grow.
  void Zygote(const std::string& role, bool ready, uint64_t restarts, uint64_t launches);
  // For metric families kept by other components (resource_metrics.h).
  prometheus::Registry& registry() { return *registry_; }

 private:
  MetricsExporter();
  struct ModelHandles;
  ModelHandles& For(const std::string& model, const std::string& version);

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* duration_;
  prometheus::Family<prometheus::Histogram>* batch_size_;
  prometheus::Family<prometheus::Gauge>* queue_depth_;
  prometheus::Family<prometheus::Gauge>* workers_;
  prometheus::Family<prometheus::Counter>* restarts_;
  prometheus::Family<prometheus::Counter>* promotions_;
  prometheus::Family<prometheus::Counter>* violations_;
  prometheus::Family<prometheus::Counter>* rollouts_;
  prometheus::Family<prometheus::Gauge>* rss_;
  prometheus::Family<prometheus::Gauge>* fallback_;
  prometheus::Family<prometheus::Gauge>* gpu_memory_;
  prometheus::Family<prometheus::Gauge>* stage_seconds_;
  prometheus::Family<prometheus::Gauge>* mps_;
  prometheus::Family<prometheus::Counter>* undeliverable_;
  prometheus::Family<prometheus::Gauge>* zygote_ready_;
  prometheus::Family<prometheus::Counter>* zygote_restarts_;
  prometheus::Family<prometheus::Counter>* zygote_launches_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<ModelHandles>>
      models_;  // (model, version)
};

}  // namespace torchfarm
