// Prometheus exposition of the farm on `metrics_endpoint` (e.g. "127.0.0.1:9464", path /metrics),
// through prometheus-cpp's pull exposer (its own civetweb HTTP threads). Off when the config has
// no metrics_endpoint.
//
// Owns: the registry, the exposer and cached handles to every metric, so recording on the
// request path is an atomic add (prometheus-cpp metrics are thread-safe; the exposer's threads
// read them while the supervisor's loop thread writes them).
//
// Metrics (names follow the Prometheus conventions):
//   torchfarm_requests_total{model,status,protocol}        counter, status = OK or an error code,
//                                                          protocol = zmq|http|grpc
//   torchfarm_request_duration_seconds{model,stage}        histogram, stage = queue|compute|total
//   torchfarm_batch_size{model}                            histogram of rows per batch
//   torchfarm_queue_depth{model}                           gauge
//   torchfarm_workers{model,state}                         gauge
//   torchfarm_worker_restarts_total{model}                 counter
//   torchfarm_worker_rss_bytes{worker,model}               gauge
//   torchfarm_gpu_fallback{worker,model}                   gauge, 1 when serving on CPU after a GPU failure
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "supervisor/request_origin.h"

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

  void RequestDone(const std::string& model, StatusCode code,
                   RequestOrigin origin = RequestOrigin::kZmq);
  void Latency(const std::string& model, double queue_s, double compute_s, double total_s);
  void Batch(const std::string& model, int64_t rows);
  void QueueDepth(const std::string& model, size_t depth);
  void Workers(const std::string& model, const std::string& state, int count);
  void WorkerRestart(const std::string& model);
  // A rolling replacement ended: `outcome` "done" or "failed".
  void Rollout(const std::string& model, const std::string& outcome);
  void WorkerRss(int worker, const std::string& model, uint64_t bytes);
  void GpuFallback(int worker, const std::string& model, bool fallen_back);
  // What a GPU worker's heartbeat reported: caching-allocator bytes and the seconds its batches
  // spent in each stage (h2d, compute, d2h; sums over its current process).
  void WorkerGpuMemory(int worker, const std::string& model, int64_t allocated, int64_t reserved);
  void WorkerStageSeconds(int worker, const std::string& model, double h2d, double compute,
                          double d2h);
  void MpsActive(bool active);

 private:
  MetricsExporter();
  struct ModelHandles;
  ModelHandles& For(const std::string& model);

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* duration_;
  prometheus::Family<prometheus::Histogram>* batch_size_;
  prometheus::Family<prometheus::Gauge>* queue_depth_;
  prometheus::Family<prometheus::Gauge>* workers_;
  prometheus::Family<prometheus::Counter>* restarts_;
  prometheus::Family<prometheus::Counter>* rollouts_;
  prometheus::Family<prometheus::Gauge>* rss_;
  prometheus::Family<prometheus::Gauge>* fallback_;
  prometheus::Family<prometheus::Gauge>* gpu_memory_;
  prometheus::Family<prometheus::Gauge>* stage_seconds_;
  prometheus::Family<prometheus::Gauge>* mps_;
  std::map<std::string, std::unique_ptr<ModelHandles>> models_;
};

}  // namespace torchfarm
