#include "supervisor/admin/metrics_exporter.h"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace torchfarm {

namespace {

// Seconds: 50 us .. 30 s, roughly x2.5 apart.
const prometheus::Histogram::BucketBoundaries& DurationBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,    0.1,    0.25,    0.5,    1.0,   2.5,    5.0,   10.0, 30.0};
  return kBuckets;
}

const prometheus::Histogram::BucketBoundaries& BatchBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  return kBuckets;
}

}  // namespace

struct MetricsExporter::ModelHandles {
  std::map<std::pair<RequestOrigin, StatusCode>, prometheus::Counter*> requests;
  prometheus::Histogram* queue = nullptr;
  prometheus::Histogram* compute = nullptr;
  prometheus::Histogram* total = nullptr;
  prometheus::Histogram* batch = nullptr;
  prometheus::Gauge* depth = nullptr;
  prometheus::Counter* restarts = nullptr;
};

MetricsExporter::MetricsExporter() : registry_(std::make_shared<prometheus::Registry>()) {
  requests_ =
      &prometheus::BuildCounter()
           .Name("torchfarm_requests_total")
           .Help(
               "Requests answered, by model, version, status (OK or the error code) and protocol "
               "(zmq, http, grpc)")
           .Register(*registry_);
  duration_ = &prometheus::BuildHistogram()
                   .Name("torchfarm_request_duration_seconds")
                   .Help(
                       "Request latency by stage: queue (arrival to dispatch), compute (the "
                       "batch's forward), total (arrival to reply); pipeline models also "
                       "decode, preprocess, postprocess (the batch's time in each)")
                   .Register(*registry_);
  batch_size_ = &prometheus::BuildHistogram()
                     .Name("torchfarm_batch_size")
                     .Help("Rows per batch sent to a worker")
                     .Register(*registry_);
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("torchfarm_queue_depth")
                      .Help("Requests waiting for a worker")
                      .Register(*registry_);
  workers_ = &prometheus::BuildGauge()
                  .Name("torchfarm_workers")
                  .Help("Worker slots by state")
                  .Register(*registry_);
  restarts_ = &prometheus::BuildCounter()
                   .Name("torchfarm_worker_restarts_total")
                   .Help("Worker restarts after a crash, hang or device failure")
                   .Register(*registry_);
  violations_ = &prometheus::BuildCounter()
                     .Name("torchfarm_worker_protocol_violations_total")
                     .Help("Workers killed for writing shared memory the layout does not allow")
                     .Register(*registry_);
  promotions_ = &prometheus::BuildCounter()
                     .Name("torchfarm_spare_promotions_total")
                     .Help("Warm spares that took the place of a serving worker that died")
                     .Register(*registry_);
  rollouts_ = &prometheus::BuildCounter()
                   .Name("torchfarm_rollouts_total")
                   .Help("Rolling replacements of a model's workers after a reload, by outcome")
                   .Register(*registry_);
  rss_ = &prometheus::BuildGauge()
              .Name("torchfarm_worker_rss_bytes")
              .Help("Resident memory of each worker process")
              .Register(*registry_);
  fallback_ = &prometheus::BuildGauge()
                   .Name("torchfarm_gpu_fallback")
                   .Help("1 when a GPU worker slot serves on the CPU after GPU failures")
                   .Register(*registry_);
  gpu_memory_ = &prometheus::BuildGauge()
                     .Name("torchfarm_worker_gpu_memory_bytes")
                     .Help("GPU memory of each GPU worker's caching allocator (kind: allocated, reserved)")
                     .Register(*registry_);
  stage_seconds_ = &prometheus::BuildGauge()
                        .Name("torchfarm_worker_stage_seconds")
                        .Help("Seconds the current worker process's batches spent per stage (h2d, compute, d2h)")
                        .Register(*registry_);
  mps_ = &prometheus::BuildGauge()
              .Name("torchfarm_mps_active")
              .Help("1 when GPU workers share their devices through an NVIDIA MPS server")
              .Register(*registry_);
  undeliverable_ = &prometheus::BuildCounter()
                        .Name("torchfarm_replies_undeliverable_total")
                        .Help("Replies libzmq could not take: the client was gone, or its pipe full")
                        .Register(*registry_);
  zygote_ready_ = &prometheus::BuildGauge()
                       .Name("torchfarm_zygote_ready")
                       .Help("1 while the worker zygote (role primary or standby) can fork workers")
                       .Register(*registry_);
  zygote_restarts_ = &prometheus::BuildCounter()
                          .Name("torchfarm_zygote_restarts_total")
                          .Help("Worker zygote processes started again after one ended, by role")
                          .Register(*registry_);
  zygote_launches_ = &prometheus::BuildCounter()
                          .Name("torchfarm_zygote_launches_total")
                          .Help("Workers forked from a zygote, by the zygote's role")
                          .Register(*registry_);
}

MetricsExporter::~MetricsExporter() = default;

Status MetricsExporter::Start(const std::string& endpoint, std::unique_ptr<MetricsExporter>* out) {
  std::unique_ptr<MetricsExporter> exporter(new MetricsExporter());
  try {
    exporter->exposer_ = std::make_unique<prometheus::Exposer>(endpoint, /*num_threads=*/1);
  } catch (const std::exception& e) {
    return Unavailable("cannot serve metrics on '" + endpoint + "': " + e.what() +
                       " (expected HOST:PORT such as 127.0.0.1:9464)");
  }
  exporter->exposer_->RegisterCollectable(exporter->registry_);
  *out = std::move(exporter);
  return Status::Ok();
}

MetricsExporter::ModelHandles& MetricsExporter::For(const std::string& model,
                                                    const std::string& version) {
  auto& handles = models_[{model, version}];
  if (!handles) {
    handles = std::make_unique<ModelHandles>();
    handles->queue = &duration_->Add({{"model", model}, {"version", version}, {"stage", "queue"}},
                                     DurationBuckets());
    handles->compute = &duration_->Add(
        {{"model", model}, {"version", version}, {"stage", "compute"}}, DurationBuckets());
    handles->total = &duration_->Add({{"model", model}, {"version", version}, {"stage", "total"}},
                                     DurationBuckets());
    handles->batch = &batch_size_->Add({{"model", model}, {"version", version}}, BatchBuckets());
    handles->depth = &queue_depth_->Add({{"model", model}, {"version", version}});
    handles->restarts = &restarts_->Add({{"model", model}, {"version", version}});
  }
  return *handles;
}

void MetricsExporter::RequestDone(const std::string& model, const std::string& version,
                                  StatusCode code, RequestOrigin origin) {
  auto& handles = For(model, version);
  auto& counter = handles.requests[{origin, code}];
  if (!counter) {
    counter = &requests_->Add({{"model", model},
                               {"version", version},
                               {"status", std::string(StatusCodeName(code))},
                               {"protocol", std::string(RequestOriginName(origin))}});
  }
  counter->Increment();
}

void MetricsExporter::Latency(const std::string& model, const std::string& version, double queue_s,
                              double compute_s, double total_s) {
  auto& handles = For(model, version);
  handles.queue->Observe(queue_s);
  handles.compute->Observe(compute_s);
  handles.total->Observe(total_s);
}

void MetricsExporter::PipelineStage(const std::string& model, const std::string& version,
                                    const char* stage, double seconds) {
  // Family::Add returns the existing histogram for labels it has seen.
  duration_->Add({{"model", model}, {"version", version}, {"stage", stage}}, DurationBuckets())
      .Observe(seconds);
}

void MetricsExporter::Batch(const std::string& model, const std::string& version, int64_t rows) {
  For(model, version).batch->Observe(static_cast<double>(rows));
}

void MetricsExporter::QueueDepth(const std::string& model, const std::string& version,
                                 size_t depth) {
  For(model, version).depth->Set(static_cast<double>(depth));
}

void MetricsExporter::Workers(const std::string& model, const std::string& version,
                              const std::string& state, int count) {
  workers_->Add({{"model", model}, {"version", version}, {"state", state}}).Set(count);
}

void MetricsExporter::WorkerRestart(const std::string& model, const std::string& version) {
  For(model, version).restarts->Increment();
}

void MetricsExporter::WorkerProtocolViolation(const std::string& model,
                                              const std::string& version) {
  violations_->Add({{"model", model}, {"version", version}}).Increment();
}

void MetricsExporter::SparePromoted(const std::string& model, const std::string& version) {
  promotions_->Add({{"model", model}, {"version", version}}).Increment();
}

void MetricsExporter::Rollout(const std::string& model, const std::string& outcome) {
  rollouts_->Add({{"model", model}, {"outcome", outcome}}).Increment();
}

void MetricsExporter::WorkerRss(int worker, const std::string& model, const std::string& version,
                                uint64_t bytes) {
  rss_->Add({{"worker", std::to_string(worker)}, {"model", model}, {"version", version}})
      .Set(static_cast<double>(bytes));
}

void MetricsExporter::GpuFallback(int worker, const std::string& model, const std::string& version,
                                  bool fallen_back) {
  fallback_->Add({{"worker", std::to_string(worker)}, {"model", model}, {"version", version}})
      .Set(fallen_back ? 1 : 0);
}

void MetricsExporter::WorkerGpuMemory(int worker, const std::string& model,
                                      const std::string& version, int64_t allocated,
                                      int64_t reserved) {
  const std::string id = std::to_string(worker);
  gpu_memory_->Add({{"worker", id}, {"model", model}, {"version", version}, {"kind", "allocated"}})
      .Set(static_cast<double>(allocated));
  gpu_memory_->Add({{"worker", id}, {"model", model}, {"version", version}, {"kind", "reserved"}})
      .Set(static_cast<double>(reserved));
}

void MetricsExporter::WorkerStageSeconds(int worker, const std::string& model,
                                         const std::string& version, double h2d, double compute,
                                         double d2h) {
  const std::string id = std::to_string(worker);
  stage_seconds_->Add({{"worker", id}, {"model", model}, {"version", version}, {"stage", "h2d"}})
      .Set(h2d);
  stage_seconds_
      ->Add({{"worker", id}, {"model", model}, {"version", version}, {"stage", "compute"}})
      .Set(compute);
  stage_seconds_->Add({{"worker", id}, {"model", model}, {"version", version}, {"stage", "d2h"}})
      .Set(d2h);
}

void MetricsExporter::MpsActive(bool active) { mps_->Add({}).Set(active ? 1 : 0); }

void MetricsExporter::ReplyUndeliverable(const char* reason) {
  undeliverable_->Add({{"reason", reason}}).Increment();
}

void MetricsExporter::Zygote(const std::string& role, bool ready, uint64_t restarts,
                             uint64_t launches) {
  zygote_ready_->Add({{"role", role}}).Set(ready ? 1 : 0);
  // The place counts; the counters catch up with it.
  for (auto [family, total] :
       {std::pair{zygote_restarts_, restarts}, std::pair{zygote_launches_, launches}}) {
    prometheus::Counter& counter = family->Add({{"role", role}});
    const double behind = static_cast<double>(total) - counter.Value();
    if (behind > 0) counter.Increment(behind);
  }
}

}  // namespace torchfarm
