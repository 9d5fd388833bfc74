#include "worker/compute_loop.h"

#include <fcntl.h>
#include <unistd.h>

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/clock.h"
#include "common/log.h"
#include "common/shm_reference.h"
#include "common/tensor_spec.h"
#include "worker/device_health.h"
#include "worker/torch_compat.h"

namespace torchfarm::worker {
namespace {

// How long the compute thread sleeps on the request doorbell before it looks at the stop flag.
constexpr int kDoorbellWaitMs = 100;
// Back-off while the response ring is full (the supervisor bounds in-flight batches, so this is a
// safety net, not a code path in normal operation).
constexpr auto kFullRingSleep = std::chrono::milliseconds(1);

// A spin-wait hint to the core (and to a hyperthread sibling).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// TorchScript interpreter errors put a TorchScript traceback before the actual error line; keep
// the error line first so it survives truncation to the slot's message field.
std::string ForwardErrorText(std::string text) {
  const std::string marker = "RuntimeError: ";
  size_t at = text.rfind(marker);
  if (at == std::string::npos) return text;
  std::string tail = text.substr(at);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  return tail + " [" + text.substr(0, at) + "]";
}

std::string WarmupShapesText(const std::vector<TensorSpec>& entry) {
  std::string shapes;
  for (const TensorSpec& spec : entry) shapes += (shapes.empty() ? "" : ", ") + SpecToString(spec);
  return shapes;
}
}  // namespace

ComputeLoop::ComputeLoop(ComputeLoopConfig config, ipc::WorkerSegment* segment,
                         const ipc::Doorbell* request_doorbell,
                         const ipc::Doorbell* response_doorbell)
    : config_(std::move(config)),
      segment_(segment),
      request_doorbell_(request_doorbell),
      response_doorbell_(response_doorbell),
      faults_(config_.faults) {}

ComputeLoop::~ComputeLoop() {
  if (thread_.joinable()) {
    RequestStop(StopMode::kAbandon);
    thread_.join();
  }
}

Status ComputeLoop::Start() {
  Status status = ipc::Doorbell::Create(&events_);
  if (!status.ok()) return status;
  try {
    thread_ = std::thread(&ComputeLoop::Run, this);
  } catch (const std::system_error& e) {
    return Internal(std::string("cannot start the compute thread: ") + e.what());
  }
  return Status::Ok();
}

void ComputeLoop::RequestStop(StopMode mode) {
  int wanted = static_cast<int>(mode);
  int current = stop_mode_.load();
  while (current < wanted && !stop_mode_.compare_exchange_weak(current, wanted)) {
  }
}

bool ComputeLoop::JoinFor(std::chrono::milliseconds timeout) {
  if (!thread_.joinable()) return true;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!finished_cv_.wait_for(lock, timeout, [this] { return finished(); })) return false;
  }
  thread_.join();
  return true;
}

void ComputeLoop::Join() {
  if (thread_.joinable()) thread_.join();
}

LoadReport ComputeLoop::load_report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return load_report_;
}

std::string ComputeLoop::fatal_device_error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fatal_device_error_;
}

ComputeStats ComputeLoop::stats() const {
  ComputeStats stats;
  stats.batches = batches_.load(std::memory_order_relaxed);
  stats.rows = rows_.load(std::memory_order_relaxed);
  stats.errors = errors_.load(std::memory_order_relaxed);
  stats.busy = busy_.load(std::memory_order_relaxed);
  stats.h2d_us = h2d_us_.load(std::memory_order_relaxed);
  stats.compute_us = compute_us_.load(std::memory_order_relaxed);
  stats.d2h_us = d2h_us_.load(std::memory_order_relaxed);
  stats.spin_hits = spin_hits_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  stats.device = device_report_;
  return stats;
}

void ComputeLoop::ReportLoad(LoadReport report) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    load_report_ = std::move(report);
  }
  events_.Ring();
}

void ComputeLoop::MarkFinished() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_.store(true, std::memory_order_release);
  }
  finished_cv_.notify_all();
  events_.Ring();
}

void ComputeLoop::Run() {
  try {
    ConfigureThread();
    if (LoadModel()) Serve();
  } catch (const FatalDeviceError& e) {
    TF_LOG(kError) << "device unusable; leaving the batch for another worker"
                   << Kv("device", config_.device) << Kv("error", e.what());
    std::lock_guard<std::mutex> lock(mutex_);
    fatal_device_error_ = e.what();
  } catch (const std::exception& e) {
    // Per-batch failures are answered in Launch/CompleteOldest; reaching this means the loop itself
    // broke. The control thread sees finished() without having asked for a stop and exits non-zero.
    TF_LOG(kError) << "compute loop failed" << Kv("error", e.what());
  }
  // Before the control thread may unmap the segment (it waits for finished()): no pool task may
  // still read a request slot.
  if (pipeline_) pipeline_->Drain();
  if (accelerator_) accelerator_->UnpinHostMemory();
  MarkFinished();
}

void ComputeLoop::ConfigureThread() {
  // Pin first: the intra-op pool's threads are created later by this thread and inherit its mask.
  if (!config_.cores.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    std::string list;
    for (int core : config_.cores) {
      if (core < 0 || core >= CPU_SETSIZE) continue;
      CPU_SET(core, &set);
      list += (list.empty() ? "" : ",") + std::to_string(core);
    }
    if (::sched_setaffinity(0, sizeof(set), &set) != 0) {
      TF_LOG(kWarn) << "cannot pin compute thread" << Kv("cores", list)
                    << Kv("error", std::strerror(errno));
    } else {
      TF_LOG(kInfo) << "compute thread pinned" << Kv("cores", list);
    }
  }
  SetIntraOpThreads(config_.threads);
  SetInterOpThreadsOnce(1);
}

bool ComputeLoop::LoadModel() {
  const TimePoint start = Clock::now();
  LoadReport report;
  try {
    if (!SetUpDevice(&report)) {
      ReportLoad(std::move(report));
      return false;
    }
    const ModelRunnerOptions options{config_.model_path, config_.model_format, device_};
    if (Status opened = OpenModelRunner(options, &model_); !opened.ok()) {
      report.error = opened.message();
    } else if (Status status = ConvertPrecision(); !status.ok()) {
      report.error = status.message();
    } else if (Status optimized = OptimizeModel(); !optimized.ok()) {
      report.error = optimized.message();
    } else if (config_.pipeline.enabled()) {
      Status stages = PipelineStages::Create(config_.pipeline, device_, &pipeline_);
      if (!stages.ok()) report.error = stages.message();
    }
  } catch (const c10::Error& e) {
    report.error = ErrorText(e);
  } catch (const std::exception& e) {
    report.error = e.what();
  }
  if (report.error.empty()) {
    // The rings are pinned before warm-up so its copies take the same path as real batches.
    Status pinned = accelerator_->PinHostMemory(segment_->base(), segment_->size());
    if (!pinned.ok()) {
      TF_LOG(kWarn) << "ring segment not pinned; copies go through pageable memory"
                    << Kv("error", pinned.message());
    }
    const TimePoint warmup_start = Clock::now();
    if (Status warmed = RunWarmup(&report); !warmed.ok()) report.error = warmed.message();
    if (report.error.empty() && !report.warmup_outputs_known) RunProbe(&report);
    report.warmup_ms = ToMicros(Clock::now() - warmup_start) / 1000.0;
  }
  if (!report.error.empty()) {
    report.state = LoadState::kFailed;
    ReportLoad(std::move(report));
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    device_report_ = accelerator_->Report();
  }
  report.state = LoadState::kLoaded;
  report.load_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  TF_LOG(kInfo) << "model loaded" << Kv("path", config_.model_path)
                << Kv("format", model_->Describe()) << Kv("device", config_.device)
                << Kv("threads", config_.threads) << Kv("precision", config_.precision)
                << Kv("lanes", accelerator_->lanes()) << Kv("load_ms", report.load_ms)
                << Kv("warmup_ms", report.warmup_ms);
  ReportLoad(std::move(report));
  return true;
}

bool ComputeLoop::SetUpDevice(LoadReport* report) {
  device_ = c10::Device(config_.device);
  if (faults_.fake_gpu() && device_.is_cuda()) {
    TF_LOG(kWarn) << "fault injection: serving the CUDA device on the CPU"
                  << Kv("device", config_.device);
    device_ = c10::Device(c10::kCPU);
  }
  Status status = Status::Ok();
  if (device_.is_cpu()) {
    accelerator_ = MakeCpuAccelerator();
  } else if (!device_.is_cuda()) {
    status = Unavailable("device type " + device_.str() + " is not supported (use cpu or cuda:N)");
  } else {
    status = MakeCudaAccelerator(device_, config_.accelerator, &accelerator_);
    if (status.ok()) device_ = accelerator_->device();  // "cuda" -> "cuda:0"
  }
  if (!status.ok()) {
    report->state = LoadState::kFailed;
    report->error = status.message();
    report->device_failure = true;
    return false;
  }
  return true;
}

Status ComputeLoop::ConvertPrecision() {
  const std::optional<c10::ScalarType> type = PrecisionType(config_.precision);
  if (!type) {
    return InvalidArgument("precision: expected fp32, fp16 or bf16, got '" + config_.precision +
                           "'");
  }
  precision_ = *type;
  if (precision_ == c10::kFloat) return Status::Ok();
  if (Status status = model_->ConvertPrecision(precision_); !status.ok()) return status;
  // The conversions ran on the default stream; the lanes' streams do not wait for it.
  accelerator_->Synchronize();
  return Status::Ok();
}

Status ComputeLoop::OptimizeModel() {
  ModelOptimize mode;
  if (Status status = ParseModelOptimize(config_.model_optimize, &mode); !status.ok()) {
    return status;
  }
  if (mode == ModelOptimize::kNone) return Status::Ok();
  const TimePoint start = Clock::now();
  if (Status status = model_->Optimize(mode); !status.ok()) return status;
  // Folding computed new constants on the default stream; the lanes' streams do not wait for it.
  accelerator_->Synchronize();
  TF_LOG(kInfo) << "model optimized" << Kv("optimize", ModelOptimizeName(mode))
                << Kv("ms", ToMicros(Clock::now() - start) / 1000.0);
  return Status::Ok();
}

Status ComputeLoop::ForwardZeros(const std::vector<TensorSpec>& entry,
                                 std::vector<TensorSpec>* outputs, bool* outputs_known) {
  const std::string shapes = WarmupShapesText(entry);
  try {
    accelerator_->UseLane(0);
    accelerator_->Mark(0, Stage::kStart);
    std::vector<c10::IValue> inputs;
    for (const TensorSpec& spec : entry) {
      at::Tensor host =
          torch::zeros(spec.shape, at::TensorOptions().dtype(ToScalarType(spec.dtype)));
      inputs.emplace_back(PrepareInput(host));
    }
    if (Status fits = model_->CheckInputs(inputs); !fits.ok()) {
      return InvalidArgument("inputs [" + shapes + "]: " + fits.message());
    }
    const c10::IValue output = model_->Forward(inputs);
    accelerator_->Mark(0, Stage::kComputed);
    accelerator_->Wait(0);
    std::vector<at::Tensor> tensors;
    // Outputs a batch could not carry fail every batch, where the client hears why; here they
    // only leave the outputs unreported.
    *outputs_known = CollectOutputs(output, &tensors).ok();
    outputs->clear();
    for (const at::Tensor& tensor : tensors) {
      if (!*outputs_known) break;
      outputs->push_back(TensorSpec{*FromScalarType(tensor.scalar_type()), tensor.sizes().vec()});
    }
  } catch (const c10::Error& e) {
    return Internal("inputs [" + shapes + "] failed: " + ForwardErrorText(ErrorText(e)));
  } catch (const std::exception& e) {
    return Internal("inputs [" + shapes + "] failed: " + e.what());
  }
  return Status::Ok();
}

Status ComputeLoop::RunWarmup(LoadReport* report) {
  InferenceModeGuard inference_mode;
  for (const auto& entry : config_.warmup) {
    std::vector<TensorSpec> outputs;
    bool known = false;
    if (Status s = ForwardZeros(entry, &outputs, &known); !s.ok()) {
      // An optimized graph can fail where the module as loaded runs (a fused kernel the device
      // lacks): say which setting to try.
      const std::string advice =
          config_.model_optimize == "none"
              ? ""
              : " (the model is optimized with \"" + config_.model_optimize +
                    "\": if it serves these inputs as loaded, set optimize to \"none\")";
      return Status(s.code(), "warm-up with " + s.message() + advice);
    }
    if (!report->warmup_outputs_known && known) {
      report->warmup_outputs = std::move(outputs);
      report->warmup_outputs_known = true;
    }
    TF_LOG(kInfo) << "warm-up batch done" << Kv("inputs", WarmupShapesText(entry));
  }
  return Status::Ok();
}

void ComputeLoop::RunProbe(LoadReport* report) {
  InferenceModeGuard inference_mode;
  std::vector<std::vector<TensorSpec>> runs;
  for (const auto& entry : config_.probe) {
    std::vector<TensorSpec> outputs;
    bool known = false;
    Status s = ForwardZeros(entry, &outputs, &known);
    if (s.ok() && !known) s = InvalidArgument("the model returned no tensor or tuple of tensors");
    if (!s.ok()) {
      TF_LOG(kWarn) << "output dry run failed; metadata lists the outputs after the first batch"
                    << Kv("error", s.message());
      return;
    }
    runs.push_back(std::move(outputs));
  }
  if (runs.empty()) return;
  // A dim that differs between the runs follows a variable input dim: -1.
  for (size_t r = 1; r < runs.size(); ++r) {
    for (size_t k = 0; k < runs[0].size() && k < runs[r].size(); ++k) {
      auto& shape = runs[0][k].shape;
      const auto& other = runs[r][k].shape;
      for (size_t d = 0; d < shape.size() && d < other.size(); ++d) {
        if (shape[d] != other[d]) shape[d] = -1;
      }
    }
  }
  report->warmup_outputs = std::move(runs[0]);
  report->warmup_outputs_known = true;
  TF_LOG(kInfo) << "outputs learned by a dry run"
                << Kv("outputs", WarmupShapesText(report->warmup_outputs));
}

void ComputeLoop::Serve() {
  for (;;) {
    // Read the stop request before looking at the ring: with kFinishRing everything published
    // before the request was made is then answered by the pass below.
    const auto mode = static_cast<StopMode>(stop_mode_.load());
    if (mode == StopMode::kAbandon) return;
    if (mode == StopMode::kNone) WaitForRequest();
    // Drain before emptying the ring, so a ring that arrives during the pass wakes the next Wait.
    request_doorbell_->Drain();
    if (!AnswerPendingRequests()) return;
    if (mode == StopMode::kFinishRing) return;
  }
}

void ComputeLoop::WaitForRequest() {
  // Only right after work is the gap to the next request worth polling through: an idle worker
  // sleeps. On a 2-core host a doorbell wake-up costs more than the rest of the worker's part of
  // an identity round trip (bench/analysis.md, "Round-trip latency at c=1"); adaptive_spin.h
  // decides when polling pays.
  if (launches_ == launches_at_last_sleep_) {
    request_doorbell_->Wait(kDoorbellWaitMs);
    return;
  }
  launches_at_last_sleep_ = launches_;
  const TimePoint idle_start = Clock::now();
  if (config_.idle_spin_us > 0 && idle_start >= next_load_sample_) {
    next_load_sample_ = idle_start + kLoadSampleInterval;
    spin_.NoteLoad(RunnableThreads(), cores_);
  }
  const AdaptiveSpin::Micros budget = spin_.Budget();
  const bool found = budget.count() > 0 && PollRing(idle_start + budget);
  if (found) {
    spin_hits_.fetch_add(1, std::memory_order_relaxed);
  } else {
    request_doorbell_->Wait(kDoorbellWaitMs);
  }
  spin_.Record(std::chrono::duration_cast<AdaptiveSpin::Micros>(Clock::now() - idle_start));
}

bool ComputeLoop::PollRing(TimePoint until) const {
  const ipc::SpscRing requests = segment_->request_ring();
  while (requests.Front() == nullptr) {
    // A stop must never wait for the poll to run out.
    if (Clock::now() >= until || Abandoned() || stop_mode_.load() != 0) return false;
    CpuRelax();
  }
  return true;
}

int ComputeLoop::RunnableThreads() {
  // /proc/loadavg: "0.52 0.58 0.59 3/412 12345"; the fourth field's numerator is the number of
  // threads running or runnable now, this one included.
  char text[128] = {};
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = ::read(fd, text, sizeof(text) - 1);
  ::close(fd);
  if (n <= 0) return 0;
  const char* field = text;
  for (int spaces = 0; *field && spaces < 3; ++field) spaces += *field == ' ';
  return std::atoi(field);
}

int ComputeLoop::UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

bool ComputeLoop::AnswerPendingRequests() {
  for (;;) {
    while (LaunchWaiting()) {
    }
    if (launched_.empty()) {
      if (Abandoned()) return false;
      const uint8_t* request = segment_->request_ring().Front();
      if (request == nullptr) {
        TrimClientRegions();
        return true;
      }
      // The response ring is full with nothing running (the supervisor bounds in-flight batches,
      // so this is a safety net): wait for it to consume.
      uint8_t* response = ReserveResponseSlot();
      if (response == nullptr) return false;
      Launch(request, response);
      continue;
    }
    WaitForOldest();
    CompleteOldest();
  }
}

bool ComputeLoop::LaunchWaiting() {
  const size_t ahead = launched_.size();
  if (ahead >= static_cast<size_t>(accelerator_->lanes()) || Abandoned()) return false;
  const uint8_t* request = segment_->request_ring().PeekAt(ahead);
  if (request == nullptr) return false;
  uint8_t* response = segment_->response_ring().TryReserveAhead(ahead);
  if (response == nullptr) return false;
  Launch(request, response);
  return true;
}

bool ComputeLoop::Abandoned() const {
  return stop_mode_.load() == static_cast<int>(StopMode::kAbandon);
}

uint8_t* ComputeLoop::ReserveResponseSlot() {
  const ipc::SpscRing responses = segment_->response_ring();
  bool warned = false;
  for (;;) {
    if (uint8_t* slot = responses.TryReserve()) return slot;
    if (Abandoned()) return nullptr;
    if (!warned) {
      TF_LOG(kWarn) << "response ring full; waiting for the supervisor to consume"
                    << Kv("slots", responses.slot_count());
      warned = true;
    }
    std::this_thread::sleep_for(kFullRingSleep);
  }
}

void ComputeLoop::Launch(const uint8_t* request, uint8_t* response) {
  busy_.store(true, std::memory_order_relaxed);
  const uint64_t batch_id = ipc::BeginResponse(request, response);
  LaunchedBatch batch{request, response, batch_id, next_lane_, Status::Ok(), 0, Clock::now(), {}};
  launch_regions_.clear();
  launch_region_inputs_.clear();
  launch_region_writes_.clear();
  next_lane_ = (next_lane_ + 1) % accelerator_->lanes();
  try {
    current_lane_ = batch.lane;
    accelerator_->UseLane(batch.lane);
    accelerator_->Mark(batch.lane, Stage::kStart);
    batch.status = RunBatch(request, response, &batch.rows, &batch.pipeline);
  } catch (const FatalDeviceError&) {
    throw;  // the batch stays unanswered; the supervisor requeues it when this worker exits
  } catch (const c10::Error& e) {
    batch.status = Internal("batch failed: " + ErrorText(e));
  } catch (const std::exception& e) {
    batch.status = Internal(std::string("batch failed: ") + e.what());
  }
  batch.regions.swap(launch_regions_);
  batch.region_inputs.swap(launch_region_inputs_);
  batch.region_writes.swap(launch_region_writes_);
  launched_.push_back(std::move(batch));
}

void ComputeLoop::WaitForOldest() {
  // On a GPU, keep feeding idle lanes while the oldest batch runs, so the copy of the next batch
  // overlaps its compute. The CPU's Poll is always true.
  while (!accelerator_->Poll(launched_.front().lane)) {
    if (!LaunchWaiting()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void ComputeLoop::CompleteOldest() {
  LaunchedBatch batch = std::move(launched_.front());
  launched_.pop_front();
  StageTimes times;
  try {
    times = accelerator_->Wait(batch.lane);
  } catch (const c10::Error& e) {
    // Same reading as a failing forward(): a poisoned context ends the loop, the batch unanswered.
    const std::string error = ErrorText(e);
    const DeviceErrorClass kind = ClassifyDeviceError(error);
    if (kind == DeviceErrorClass::kSticky ||
        (kind != DeviceErrorClass::kModel && !ProbeDevice(device_))) {
      throw FatalDeviceError(error);
    }
    batch.status = Internal("batch failed on the device: " + error);
  }
  if (batch.status.ok()) batch.status = FlushRegionWrites(batch.region_writes);
  ipc::FinishResponse(batch.status, static_cast<uint64_t>(ToMicros(Clock::now() - batch.start)),
                      batch.response, pipeline_ ? &batch.pipeline : nullptr);
  if (!batch.status.ok()) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    TF_LOG(kWarn) << "batch failed" << Kv("batch", batch.batch_id)
                  << Kv("status", StatusCodeName(batch.status.code()))
                  << Kv("error", batch.status.message());
  }
  h2d_us_.fetch_add(static_cast<uint64_t>(times.h2d_us), std::memory_order_relaxed);
  compute_us_.fetch_add(static_cast<uint64_t>(times.compute_us), std::memory_order_relaxed);
  d2h_us_.fetch_add(static_cast<uint64_t>(times.d2h_us), std::memory_order_relaxed);
  if (!device_.is_cpu()) {
    std::lock_guard<std::mutex> lock(mutex_);
    device_report_ = accelerator_->Report();
  }
  // Counters before the response is visible: a client holding its reply sees them counted.
  batches_.fetch_add(1, std::memory_order_relaxed);
  rows_.fetch_add(batch.rows > 0 ? static_cast<uint64_t>(batch.rows) : 0,
                  std::memory_order_relaxed);
  segment_->response_ring().Publish();
  response_doorbell_->Ring();
  // Only now: the input tensors pointed into the request slot, and the lane's copies are done.
  if (pipeline_) pipeline_->DropPrefetchOf(batch.request);
  segment_->request_ring().Pop();
  for (ipc::SharedRegion* region : batch.regions) client_regions_.Release(region);
  TrimClientRegions();
  busy_.store(!launched_.empty(), std::memory_order_relaxed);
}

Status ComputeLoop::RunBatch(const uint8_t* request, uint8_t* response, int64_t* rows,
                             ipc::PipelineOutcome* pipeline) {
  InferenceModeGuard inference_mode;
  ipc::RequestView view;
  Status status = ipc::ReadRequest(request, segment_->data_capacity(), &view);
  if (!status.ok()) return status;
  std::vector<c10::IValue> inputs;
  bool run_model = true;
  const bool stages = pipeline_ && pipeline_->has_item_stages();
  status = stages ? BuildPipelineInputs(request, view, &inputs, rows, pipeline, &run_model)
                  : BuildInputs(view, &inputs, rows);
  if (!status.ok()) return status;
  // Double buffering: the next slot's items decode on the pool while this batch's forward() runs
  // (this batch is at ring position launched_.size(): it is not in launched_ yet).
  if (stages && config_.pipeline.overlap) {
    pipeline_->Prefetch(segment_->request_ring().PeekAt(launched_.size() + 1),
                        segment_->data_capacity());
  }
  accelerator_->Mark(current_lane_, Stage::kInputsCopied);
  std::vector<at::Tensor> tensors;
  status = RunModel(inputs, run_model, &tensors, pipeline);
  if (!status.ok()) return status;
  accelerator_->Mark(current_lane_, Stage::kComputed);
  status = WriteOutputs(tensors, view, response);
  accelerator_->Mark(current_lane_, Stage::kOutputsCopied);
  return status;
}

Status ComputeLoop::RunModel(const std::vector<c10::IValue>& inputs, bool run_model,
                             std::vector<at::Tensor>* tensors, ipc::PipelineOutcome* pipeline) {
  const FaultKind fault = faults_.Take(++launches_);
  if (!run_model) return Status::Ok();  // every row failed: no outputs, each row says why
  Status status = ForwardWithRecovery(inputs, fault, tensors);
  if (!status.ok() || !pipeline_ || !pipeline_->has_postprocess()) return status;
  c10::IValue post;
  if (status = pipeline_->Postprocess(*tensors, &post, pipeline); !status.ok()) return status;
  tensors->clear();
  return CollectOutputs(post, tensors);
}

Status ComputeLoop::ForwardOnce(const std::vector<c10::IValue>& inputs, FaultKind fault,
                                std::vector<at::Tensor>* outputs, std::string* device_error) {
  // A batch the model cannot take is the request's error (INVALID_ARGUMENT), not a device's.
  if (Status fits = model_->CheckInputs(inputs); !fits.ok()) return fits;
  c10::IValue output;
  try {
    TriggerFault(fault);
    output = model_->Forward(inputs);
  } catch (const c10::Error& e) {
    *device_error = ErrorText(e);
    return Internal("forward failed: " + ForwardErrorText(*device_error));
  } catch (const std::exception& e) {
    *device_error = e.what();
    return Internal("forward failed: " + ForwardErrorText(*device_error));
  }
  outputs->clear();
  return CollectOutputs(output, outputs);
}

Status ComputeLoop::ForwardWithRecovery(const std::vector<c10::IValue>& inputs, FaultKind fault,
                                        std::vector<at::Tensor>* outputs) {
  std::string error;
  Status status = ForwardOnce(inputs, fault, outputs, &error);
  if (status.ok() || error.empty()) return status;
  switch (ClassifyDeviceError(error)) {
    case DeviceErrorClass::kModel:
      return status;
    case DeviceErrorClass::kOutOfMemory:
      return RetryInHalves(inputs, error, outputs);
    case DeviceErrorClass::kOtherDevice:
      if (ProbeDevice(device_)) return status;  // the device still works: the model's own error
      throw FatalDeviceError(error);
    case DeviceErrorClass::kSticky:
      throw FatalDeviceError(error);
  }
  return status;
}

Status ComputeLoop::RetryInHalves(const std::vector<c10::IValue>& inputs, const std::string& error,
                                  std::vector<at::Tensor>* outputs) {
  int64_t rows = -1;
  for (const auto& input : inputs) {
    if (!input.isTensor() || input.toTensor().dim() == 0)
      rows = 0;
    else if (rows == -1)
      rows = input.toTensor().size(0);
    else if (input.toTensor().size(0) != rows)
      rows = 0;
  }
  if (rows < 2) {
    return ResourceExhausted("out of device memory, and the batch cannot be split: " + error);
  }
  TF_LOG(kWarn) << "out of device memory; retrying as two half batches" << Kv("rows", rows);
  const int64_t half = rows / 2;
  std::vector<std::vector<at::Tensor>> parts(2);
  for (int p = 0; p < 2; ++p) {
    std::vector<c10::IValue> part;
    for (const auto& input : inputs) {
      part.emplace_back(input.toTensor().narrow(0, p == 0 ? 0 : half, p == 0 ? half : rows - half));
    }
    std::string part_error;
    Status status = ForwardOnce(part, FaultKind::kNone, &parts[p], &part_error);
    if (!status.ok()) {
      if (ClassifyDeviceError(part_error) == DeviceErrorClass::kOutOfMemory) {
        return ResourceExhausted("out of device memory even for half the batch (" +
                                 std::to_string(half) + " rows): " + part_error);
      }
      return status;
    }
  }
  if (parts[0].size() != parts[1].size())
    return Internal("half batches returned different outputs");
  outputs->clear();
  for (size_t i = 0; i < parts[0].size(); ++i) {
    outputs->push_back(torch::cat({parts[0][i], parts[1][i]}, 0));
  }
  return Status::Ok();
}

}  // namespace torchfarm::worker
