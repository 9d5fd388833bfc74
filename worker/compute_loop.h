// The worker's compute thread: loads one model (TorchScript or an AOTInductor package, through
// worker/model_runner.h) and answers every request slot of the
// worker's shared-memory segment with a response slot, in ring order.
//
// Owns: the std::thread it starts (joined in Stop*/the destructor), the loaded ModelRunner
// and the Accelerator (both touched by that thread only), the batch counters, and an eventfd that
// it rings when the model load finished (either way) and when the thread is about to return.
//
// Threads: Start/RequestStop/Join/stats/load_report/event_fd are called by the control thread
// (worker/worker.h); everything else runs on the compute thread, the only thread in the worker
// that calls into torch. Thread-count settings are made on that thread because intra-op settings
// made on another thread were measured not to reach OpenBLAS.
//
// Load: device (worker/accelerator.h; a GPU that cannot be used is a device failure), model moved
// to it once, floating parameters converted to `precision`, the ring segment registered for DMA,
// then one forward per `warmup` entry before the load is reported.
//
// Per batch: read the request's TensorDescs, wrap the request slot's bytes with from_blob (no
// copy), move them to the device on the batch's lane, run forward() under InferenceMode, copy the
// outputs into a response slot. Up to accelerator->lanes() batches are in flight (CUDA streams);
// they complete in ring order: wait for the lane, publish the response, ring the response doorbell
// and only then pop the request (the input tensors pointed into it). A batch that fails gets a
// response with a status and message; the loop keeps serving.
//
// Client regions (in place) belong to the client, who may truncate one at any moment; touching a
// page past its new end raises SIGBUS. So no region page ever reaches the model or a device copy:
// an in-place input is copied out into private memory, and an in-place output is computed into
// private memory and copied into the region once its lane is done, each copy after an fstat size
// check and under the SIGBUS guard (ipc/guarded_copy.h, installed in main). A region that shrank
// fails only its request, with INVALID_ARGUMENT; the worker lives on. The guarded memcpy was
// chosen over reading the shm fd with pread: it keeps the region's mapping cache and costs the
// same one copy, and the guard is already what the supervisor uses for the same regions.
//
// Pipeline (config "pipeline", worker/pipeline_stages.h): the inputs come from the stages (decode
// and preprocess on their pool, prefetched for the next slot while this batch's forward() runs),
// and postprocess runs on the outputs before they are written.
#pragma once

#include <torch/script.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/pipeline_config.h"
#include "common/status.h"
#include "common/tensor_spec.h"
#include "ipc/client_region_cache.h"
#include "ipc/doorbell.h"
#include "ipc/slot_codec.h"
#include "ipc/worker_segment.h"
#include "worker/accelerator.h"
#include "worker/adaptive_spin.h"
#include "worker/fault_injection.h"
#include "worker/model_runner.h"
#include "worker/pipeline_stages.h"

namespace torchfarm::worker {

struct ComputeLoopConfig {
  std::string model_path;
  std::string model_format = "auto";    // worker/model_runner.h: auto, torchscript, aoti
  std::string model_optimize = "none";  // worker/model_runner.h: none, freeze, inference
  std::string device = "cpu";  // "cpu", "cuda", "cuda:1", as at::Device parses it
  int threads = 1;             // intra-op threads
  std::vector<int> cores;      // CPU affinity of the compute thread; empty: not pinned
  // "fp32", "fp16" or "bf16": floating parameters, buffers and inputs are converted to it; outputs
  // in that type come back as float32 (docs/gpu.md).
  std::string precision = "fp32";
  AcceleratorOptions accelerator;
  // One forward per entry (one spec per model input, zero-filled) before the load is reported.
  std::vector<std::vector<TensorSpec>> warmup;
  // Dry runs after warm-up when it reported no outputs (common/config.h, OutputProbeBatches):
  // their outputs become warmup_outputs, a failure only leaves them unknown (logged).
  std::vector<std::vector<TensorSpec>> probe;
  // After a pass that answered something, poll the ring up to this long before sleeping, while
  // adaptive_spin.h finds it pays (config.h); 0: never.
  int idle_spin_us = 0;
  FaultPlan faults;  // tests only (TORCHFARM_FAULT)
  PipelineConfig pipeline;  // none by default
};

enum class LoadState { kLoading, kLoaded, kFailed };

struct LoadReport {
  LoadState state = LoadState::kLoading;
  double load_ms = 0;
  double warmup_ms = 0;
  std::string error;            // kFailed: why, without the model path
  bool device_failure = false;  // kFailed because the requested accelerator is unusable
  // What the first warm-up batch returned, as a reply would carry it (the "ready" message's
  // "outputs", ipc/control_protocol.h); known only after a warm-up whose outputs were tensors.
  std::vector<TensorSpec> warmup_outputs;
  bool warmup_outputs_known = false;
};

// A snapshot of the counters the heartbeat carries. batches and rows count every batch answered;
// errors counts those answered with a non-OK status.
struct ComputeStats {
  uint64_t batches = 0;
  uint64_t rows = 0;
  uint64_t errors = 0;
  bool busy = false;
  // Sums over answered batches of where they spent their time (StageTimes), in microseconds.
  uint64_t h2d_us = 0;
  uint64_t compute_us = 0;
  uint64_t d2h_us = 0;
  uint64_t spin_hits = 0;  // requests found by the idle spin (no doorbell wake-up needed)
  DeviceReport device;  // as of the last answered batch (or the load)
};

enum class StopMode : int {
  kNone = 0,
  kFinishRing = 1,  // answer what is already in the request ring, then return
  kAbandon = 2,     // return after the batch in progress (forward() cannot be interrupted)
};

class ComputeLoop {
 public:
  // `segment` and both doorbells must outlive this object.
  ComputeLoop(ComputeLoopConfig config, ipc::WorkerSegment* segment,
              const ipc::Doorbell* request_doorbell, const ipc::Doorbell* response_doorbell);
  // Abandons the ring and joins.
  ~ComputeLoop();
  ComputeLoop(const ComputeLoop&) = delete;
  ComputeLoop& operator=(const ComputeLoop&) = delete;

  // Creates the event fd and starts the compute thread.
  Status Start();
  // Asks the thread to stop; a stronger mode overrides a weaker one. Does not wait.
  void RequestStop(StopMode mode);
  // Waits for the thread to return and joins it; false (thread still joinable) on timeout.
  bool JoinFor(std::chrono::milliseconds timeout);
  void Join();

  // Readable when load_report() or finished() changed; the reader drains it.
  const ipc::Doorbell& events() const { return events_; }
  LoadReport load_report() const;
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  ComputeStats stats() const;
  // Non-empty when the thread returned because its device became unusable (a sticky CUDA
  // error); the batch it was running is left unanswered so the supervisor runs it elsewhere.
  std::string fatal_device_error() const;

 private:
  void Run();
  void ConfigureThread();
  bool LoadModel();
  void Serve();
  bool SetUpDevice(LoadReport* report);
  Status ConvertPrecision();
  // The model's optimize setting (config_.model_optimize), applied once it is in its precision.
  Status OptimizeModel();
  Status RunWarmup(LoadReport* report);
  // One zero-filled forward of `entry` on lane 0; the output specs when they are tensors.
  Status ForwardZeros(const std::vector<TensorSpec>& entry, std::vector<TensorSpec>* outputs,
                      bool* outputs_known);
  void RunProbe(LoadReport* report);
  // Answers what the request ring holds; false when the loop must return (abandoned).
  bool AnswerPendingRequests();
  bool Abandoned() const;
  uint8_t* ReserveResponseSlot();
  // An in-place output computed into private memory, for the client region at `offset`.
  struct RegionWrite {
    ipc::SharedRegion* region;
    uint64_t offset;
    at::Tensor host;
  };
  // Copies the in-place outputs of a finished batch into their regions (guarded); INVALID_ARGUMENT
  // when a region shrank under the range.
  static Status FlushRegionWrites(const std::vector<RegionWrite>& writes);
  // A batch launched on a lane and not yet answered (compute thread only).
  struct LaunchedBatch {
    const uint8_t* request;
    uint8_t* response;
    uint64_t batch_id;
    int lane;
    Status status;
    int64_t rows;
    TimePoint start;
    std::vector<ipc::SharedRegion*> regions;  // client regions its tensors point into
    std::vector<at::Tensor> region_inputs;    // private copies of its in-place inputs
    std::vector<RegionWrite> region_writes;   // its in-place outputs, copied in when done
    ipc::PipelineOutcome pipeline;            // stage times and failed rows (pipeline models)
  };
  void Launch(const uint8_t* request, uint8_t* response);
  // Launches the next waiting request when a lane and a response slot are free; false otherwise.
  bool LaunchWaiting();
  // Waits for the oldest launched batch while launching newly arrived requests on free lanes.
  void WaitForOldest();
  void CompleteOldest();
  Status RunBatch(const uint8_t* request, uint8_t* response, int64_t* rows,
                  ipc::PipelineOutcome* pipeline);
  // The model's inputs from the pipeline's stages; `*run_model` false when every row failed.
  Status BuildPipelineInputs(const uint8_t* request, const ipc::RequestView& view,
                             std::vector<c10::IValue>* inputs, int64_t* rows,
                             ipc::PipelineOutcome* outcome, bool* run_model);
  // Forward (or nothing, when no row is left) and postprocess, into `tensors`.
  Status RunModel(const std::vector<c10::IValue>& inputs, bool run_model,
                  std::vector<at::Tensor>* tensors, ipc::PipelineOutcome* pipeline);
  // forward() plus recovery: out of memory -> two half batches; sticky device error -> throws
  // FatalDeviceError; anything else fails the batch.
  Status ForwardWithRecovery(const std::vector<c10::IValue>& inputs, FaultKind fault,
                             std::vector<at::Tensor>* outputs);
  Status ForwardOnce(const std::vector<c10::IValue>& inputs, FaultKind fault,
                     std::vector<at::Tensor>* outputs, std::string* device_error);
  Status RetryInHalves(const std::vector<c10::IValue>& inputs, const std::string& error,
                       std::vector<at::Tensor>* outputs);
  // Wraps the request's inputs (in the slot, or in place in client regions) as tensors.
  Status BuildInputs(const ipc::RequestView& request, std::vector<c10::IValue>* inputs,
                     int64_t* rows);
  // A host tensor on the device in the model's precision (floating types only).
  at::Tensor PrepareInput(const at::Tensor& host);
  Status CollectOutputs(const c10::IValue& output, std::vector<at::Tensor>* tensors);
  // Into the response slot, or into the client region the request names (in place).
  Status WriteOutputs(const std::vector<at::Tensor>& tensors, const ipc::RequestView& request,
                      uint8_t* response);
  // Between passes: polls the request ring when adaptive_spin.h says it pays, else (or when the
  // poll runs out) sleeps on the doorbell; records the gap for the policy.
  void WaitForRequest();
  // Polls until a request is in the ring (true), `until`, or a stop.
  bool PollRing(TimePoint until) const;
  // Threads running or runnable on the machine now (/proc/loadavg), and the cores this thread
  // may use: adaptive_spin.h's load samples.
  static int RunnableThreads();
  static int UsableCores();
  // Unmaps client regions that are gone (ClientRegionCache::Trim), at most once a second.
  void TrimClientRegions();
  // Maps a client region for the batch being launched; released when the batch completes.
  Status AcquireClientRegion(const ipc::ClientRegionRef& ref, ipc::SharedRegion** out);
  void ReportLoad(LoadReport report);
  void MarkFinished();

  const ComputeLoopConfig config_;
  ipc::WorkerSegment* const segment_;
  ipc::ClientRegionCache client_regions_;  // compute thread only
  uint64_t launches_at_last_sleep_ = 0;    // WaitForRequest: poll once per pass that did work
  AdaptiveSpin spin_{config_.idle_spin_us};
  static constexpr std::chrono::milliseconds kLoadSampleInterval{2};
  TimePoint next_load_sample_{};
  const int cores_ = UsableCores();
  std::vector<ipc::SharedRegion*> launch_regions_;  // acquired by the batch being launched
  std::vector<at::Tensor> launch_region_inputs_;    // its private copies of in-place inputs
  std::vector<RegionWrite> launch_region_writes_;   // its in-place outputs
  TimePoint next_region_trim_{};
  const ipc::Doorbell* const request_doorbell_;
  const ipc::Doorbell* const response_doorbell_;
  ipc::Doorbell events_;

  // Compute thread only.
  std::unique_ptr<ModelRunner> model_;
  std::unique_ptr<PipelineStages> pipeline_;  // null without a "pipeline"
  c10::Device device_{c10::kCPU};
  std::unique_ptr<Accelerator> accelerator_;
  c10::ScalarType precision_ = c10::kFloat;
  std::deque<LaunchedBatch> launched_;
  uint64_t launches_ = 0;
  int next_lane_ = 0;
  int current_lane_ = 0;  // the lane of the batch being launched
  FaultPlan faults_;

  std::atomic<int> stop_mode_{static_cast<int>(StopMode::kNone)};
  std::atomic<uint64_t> batches_{0};
  std::atomic<uint64_t> rows_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<bool> busy_{false};
  std::atomic<uint64_t> h2d_us_{0};
  std::atomic<uint64_t> compute_us_{0};
  std::atomic<uint64_t> d2h_us_{0};
  std::atomic<uint64_t> spin_hits_{0};
  std::atomic<bool> finished_{false};

  mutable std::mutex mutex_;
  std::condition_variable finished_cv_;
  LoadReport load_report_;          // guarded by mutex_
  std::string fatal_device_error_;  // guarded by mutex_
  DeviceReport device_report_;      // guarded by mutex_

  std::thread thread_;
};

}  // namespace torchfarm::worker
