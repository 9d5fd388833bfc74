#include "supervisor/supervisor.h"

#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "common/log.h"
#include "common/protocol.h"
#include "ipc/control_protocol.h"
#include "supervisor/job_intake.h"

namespace torchfarm {

using nlohmann::json;

namespace {

// Messages read from one socket per loop turn, so doorbells and signals are never starved.
constexpr int kMaxMessagesPerTurn = 256;
constexpr Millis kMaxPollTimeout{100};
constexpr Millis kStopGrace{5'000};

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

std::string SelfDirectory() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

bool ReceiveMultipart(zmq::socket_t& socket, std::vector<zmq::message_t>* frames) {
  frames->clear();
  while (true) {
    zmq::message_t part;
    auto got = socket.recv(part, frames->empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
    if (!got) return false;
    bool more = part.more();
    frames->push_back(std::move(part));
    if (!more) return true;
  }
}

BatchingPolicy PolicyFor(const ModelConfig& m) {
  BatchingPolicy p;
  p.max_batch_size = m.max_batch_size;
  p.max_queue_delay_us = m.max_queue_delay_us;
  p.preferred_batch_sizes = m.preferred_batch_sizes;
  p.max_queue_size = m.max_queue_size;
  p.priority_levels = m.priority_levels;
  p.max_batch_bytes = m.slot_bytes;
  return p;
}

}  // namespace

Supervisor::Supervisor(FarmConfig config, SupervisorOptions options)
    : config_(std::move(config)), options_(std::move(options)), context_(1),
      jobs_(context_, zmq::socket_type::router), control_(context_, zmq::socket_type::router),
      admin_(context_, zmq::socket_type::router) {}

Supervisor::~Supervisor() { CleanUp(); }

Status Supervisor::Start() {
  started_ = clock_.Now();
  ::umask(077);  // ipc socket files and every file in run_dir: owner only
  if (Status s = lock_.Acquire(config_.run_dir); !s.ok()) return s;
  RemoveStaleFiles(config_.run_dir);
  if (Status s = signals_.Open({SIGCHLD, SIGTERM, SIGINT, SIGHUP}); !s.ok()) return s;
  ::signal(SIGPIPE, SIG_IGN);

  control_path_ = config_.run_dir + "/control-" + std::to_string(::getpid()) + ".sock";
  launch_.control_endpoint = "ipc://" + control_path_;
  launch_.worker_binary = config_.worker_binary.empty() ? SelfDirectory() + "/torchfarm-worker"
                                                        : config_.worker_binary;
  launch_.segment_prefix = "torchfarm-" + std::to_string(::getpid()) + "-";
  launch_.heartbeat_ms = config_.heartbeat_ms;
  launch_.log_level = options_.log_level;
  if (::access(launch_.worker_binary.c_str(), X_OK) != 0) {
    return NotFound("worker binary '" + launch_.worker_binary +
                    "' is missing or not executable (set worker_binary in the config)");
  }

  for (auto* socket : {&jobs_, &control_, &admin_}) socket->set(zmq::sockopt::linger, 0);
  jobs_.set(zmq::sockopt::rcvhwm, 100'000);
  jobs_.set(zmq::sockopt::sndhwm, 100'000);
  const std::pair<zmq::socket_t*, std::string> binds[] = {
      {&jobs_, config_.endpoint}, {&control_, launch_.control_endpoint}, {&admin_, config_.admin_endpoint}};
  for (const auto& [socket, endpoint] : binds) {
    try {
      socket->bind(endpoint);
    } catch (const zmq::error_t& e) {
      return Unavailable("cannot bind '" + endpoint + "': " + e.what());
    }
  }

  int cores = AvailableCores();
  int cpu_threads = 0;
  for (size_t m = 0; m < config_.models.size(); ++m) {
    const ModelConfig& mc = config_.models[m];
    models_.push_back(Model{mc, ModelQueue(PolicyFor(mc)), {}});
    for (const auto& instance : mc.instances) {
      int count = ResolveInstanceCount(instance, cores);
      for (int i = 0; i < count; ++i) {
        models_[m].slots.push_back(slots_.size());
        slots_.push_back(std::make_unique<WorkerSlot>(static_cast<int>(slots_.size()), mc, instance, m));
        if (instance.device == "cpu") cpu_threads += instance.threads;
      }
    }
  }
  if (cpu_threads > cores) {
    TF_LOG(kWarn) << "CPU workers' threads exceed the cores this supervisor may use; expect "
                     "oversubscription (set threads, count or cores)"
                  << Kv("threads", cpu_threads) << Kv("cores", cores);
  }
  for (auto& slot : slots_) LaunchSlot(*slot);
  TF_LOG(kInfo) << "supervisor serving" << Kv("endpoint", config_.endpoint)
                << Kv("admin", config_.admin_endpoint) << Kv("workers", slots_.size())
                << Kv("models", config_.models.size());
  return Status::Ok();
}

void Supervisor::LaunchSlot(WorkerSlot& slot) {
  Status s = slot.Launch(launch_, clock_.Now());
  if (!s.ok()) {
    slot.set_failure_reason(s.message());
    slot.TransitionTo(SlotState::kFailed, s.message());
    FailModelIfNoWorkers(models_[slot.model_index()]);
  }
}

int Supervisor::Run() {
  std::vector<zmq::pollitem_t> items;
  std::vector<WorkerSlot*> bell_owners;
  while (!done_) {
    items.clear();
    bell_owners.clear();
    items.push_back({static_cast<void*>(jobs_), 0, ZMQ_POLLIN, 0});
    items.push_back({static_cast<void*>(control_), 0, ZMQ_POLLIN, 0});
    items.push_back({static_cast<void*>(admin_), 0, ZMQ_POLLIN, 0});
    items.push_back({nullptr, signals_.fd(), ZMQ_POLLIN, 0});
    for (auto& slot : slots_) {
      if (slot->response_fd() >= 0) {
        items.push_back({nullptr, slot->response_fd(), ZMQ_POLLIN, 0});
        bell_owners.push_back(slot.get());
      }
    }
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(PollTimeoutMs()));

    if (items[3].revents & ZMQ_POLLIN) HandleSignals();
    for (size_t i = 0; i < bell_owners.size(); ++i) {
      if (items[4 + i].revents & ZMQ_POLLIN) HandleResponses(*bell_owners[i]);
    }
    if (items[1].revents & ZMQ_POLLIN) HandleControl();
    if (items[0].revents & ZMQ_POLLIN) HandleJobs();
    if (items[2].revents & ZMQ_POLLIN) HandleAdmin();
    ExpireDeadlines();
    CheckWorkerLiveness();
    RestartDueSlots();
    Dispatch();
    DrainStep();
  }
  CleanUp();
  TF_LOG(kInfo) << "supervisor stopped";
  return 0;
}

int Supervisor::PollTimeoutMs() const {
  TimePoint now = clock_.Now();
  TimePoint next = now + kMaxPollTimeout;
  for (const auto& model : models_) {
    if (auto due = model.queue.NextDue(); due && *due < next) next = *due;
  }
  auto ms = std::chrono::duration_cast<Millis>(next - now).count();
  // Round sub-millisecond waits up so a batch delay never degenerates into a busy loop.
  return static_cast<int>(std::clamp<int64_t>(ms + (next > now ? 1 : 0), 0, kMaxPollTimeout.count()));
}

void Supervisor::HandleSignals() {
  for (int signo : signals_.ReadPending()) {
    if (signo == SIGCHLD) {
      int status = 0;
      pid_t pid;
      while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) OnChildExit(pid, status);
    } else if (signo == SIGTERM || signo == SIGINT) {
      if (draining_) {
        TF_LOG(kWarn) << "second stop signal: skipping the rest of the drain" << Kv("signal", SignalName(signo));
        drain_deadline_ = clock_.Now();
      } else {
        TF_LOG(kInfo) << "stop signal: draining" << Kv("signal", SignalName(signo))
                      << Kv("drain_timeout_ms", options_.drain_timeout.count());
        draining_ = true;
        drain_deadline_ = clock_.Now() + options_.drain_timeout;
      }
    } else if (signo == SIGHUP) {
      TF_LOG(kInfo) << "SIGHUP received; config reload is not supported yet, ignoring";
    }
  }
}

void Supervisor::OnChildExit(pid_t pid, int wait_status) {
  for (auto& slot : slots_) {
    if (slot->pid() != pid) continue;
    bool expected = stopping_workers_ || slot->state() == SlotState::kStopping;
    auto orphans = slot->OnExit(wait_status, clock_.Now(), options_.restart, stopping_workers_);
    TF_LOG_AT(expected ? LogLevel::kInfo : LogLevel::kWarn) << "worker exited" << Kv("worker", slot->id())
                                     << Kv("pid", pid) << Kv("model", slot->model_name())
                                     << Kv("cause", slot->last_exit())
                                     << Kv("inflight_batches", orphans.size());
    for (auto& batch : orphans) Requeue(batch, slot->model_index(), slot->last_exit());
    FailModelIfNoWorkers(models_[slot->model_index()]);
    return;
  }
}

void Supervisor::Requeue(InflightBatch& batch, size_t model_index, const std::string& cause) {
  Model& model = models_[model_index];
  std::vector<PendingRequest> retry;
  for (auto& r : batch.requests) {
    ++r.attempts;
    if (r.attempts > options_.max_retries) {
      ++model.errors;
      ReplyError(r, Internal("worker crashed while running this request (" + cause + ") " +
                             std::to_string(r.attempts) + " times"));
    } else {
      retry.push_back(std::move(r));
    }
  }
  model.queue.PushFront(std::move(retry));
}

void Supervisor::FailModelIfNoWorkers(Model& model) {
  if (ModelAvailable(model)) return;
  std::string reason;
  for (size_t i : model.slots) {
    if (!slots_[i]->failure_reason().empty()) reason = slots_[i]->failure_reason();
  }
  Status status = Unavailable("model '" + model.config.name + "' has no live worker: " +
                              (reason.empty() ? "all workers failed" : reason));
  for (auto& r : model.queue.TakeAll()) {
    ++model.errors;
    ReplyError(r, status);
  }
}

bool Supervisor::ModelAvailable(const Model& model) const {
  for (size_t i : model.slots) {
    SlotState s = slots_[i]->state();
    if (s == SlotState::kStarting || s == SlotState::kReady || s == SlotState::kBackoff) return true;
  }
  return false;
}

void Supervisor::HandleResponses(WorkerSlot& slot) {
  slot.CollectResponses([&](InflightBatch& batch, const uint8_t* response) {
    ReplyBatch(slot, batch, response);
  });
}

void Supervisor::ReplyBatch(WorkerSlot& slot, InflightBatch& batch, const uint8_t* response) {
  Model& model = models_[slot.model_index()];
  const ipc::SlotHeader* header = ipc::SlotHeaderOf(response);
  TimePoint now = clock_.Now();
  slot.batches_done++;
  slot.rows_done += static_cast<uint64_t>(batch.rows);
  slot.requests_done += batch.requests.size();

  Status failure;
  if (header->batch_id != batch.batch_id) {
    failure = Internal("worker answered batch " + std::to_string(header->batch_id) +
                       " while batch " + std::to_string(batch.batch_id) + " was expected");
  } else if (header->status != 0) {
    std::string message(header->message, strnlen(header->message, ipc::kSlotMessageBytes));
    auto code = static_cast<StatusCode>(header->status);
    if (!ParseStatusCode(StatusCodeName(code))) code = StatusCode::kInternal;
    failure = Status(code, message);
  }
  std::vector<TensorSpec> outputs;
  const uint8_t* data = ipc::SlotData(response);
  for (uint32_t i = 0; failure.ok() && i < header->tensor_count && i < ipc::kMaxTensors; ++i) {
    TensorSpec spec;
    const ipc::TensorDesc& desc = header->tensors[i];
    if (!ipc::ReadTensorDesc(desc, &spec) || desc.offset + desc.nbytes > slot.data_capacity() ||
        ByteSize(spec) != desc.nbytes) {
      failure = Internal("worker wrote a malformed output descriptor " + std::to_string(i));
    } else if (batch.requests.size() > 1 && (spec.shape.empty() || spec.shape[0] != batch.rows)) {
      failure = Internal("output " + std::to_string(i) + " has shape " + ShapeToString(spec.shape) +
                         " but the batch had " + std::to_string(batch.rows) +
                         " rows; a batched model must keep dim 0 (set max_batch_size 1)");
    }
    outputs.push_back(std::move(spec));
  }
  if (!failure.ok()) {
    for (auto& r : batch.requests) {
      ++model.errors;
      ReplyError(r, failure);
    }
    return;
  }
  int64_t row_start = 0;
  for (auto& r : batch.requests) {
    std::vector<TensorSpec> mine = outputs;
    std::vector<zmq::message_t> frames;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const ipc::TensorDesc& desc = header->tensors[i];
      uint64_t begin = 0, length = desc.nbytes;
      if (batch.requests.size() > 1) {
        uint64_t row_bytes = desc.nbytes / static_cast<uint64_t>(batch.rows);
        begin = row_bytes * static_cast<uint64_t>(row_start);
        length = row_bytes * static_cast<uint64_t>(r.rows);
        mine[i].shape[0] = r.rows;
      }
      frames.emplace_back(data + desc.offset + begin, length);
    }
    row_start += r.rows;
    StageTimes timing;
    timing.queue_us = ToMicros(batch.dispatched - r.received);
    timing.compute_us = static_cast<int64_t>(header->compute_us);
    timing.total_us = ToMicros(now - r.received);
    ++model.requests;
    Reply(r, MakeOkReply(r.id, mine, timing, slot.id()), &frames);
  }
}

void Supervisor::Reply(PendingRequest& request, const std::string& header,
                       std::vector<zmq::message_t>* frames) {
  // A client that went away makes ROUTER drop the message; that is the only loss, and it is the
  // client's own.
  const bool has_frames = frames && !frames->empty();
  jobs_.send(request.identity, zmq::send_flags::sndmore);
  if (request.has_delimiter) jobs_.send(zmq::message_t(), zmq::send_flags::sndmore);
  jobs_.send(zmq::buffer(header), has_frames ? zmq::send_flags::sndmore : zmq::send_flags::none);
  if (!has_frames) return;
  for (size_t i = 0; i < frames->size(); ++i) {
    jobs_.send((*frames)[i], i + 1 < frames->size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

void Supervisor::ReplyError(PendingRequest& request, const Status& status) {
  Reply(request, MakeErrorReply(request.id, status), nullptr);
}

void Supervisor::HandleControl() {
  std::vector<zmq::message_t> frames;
  for (int n = 0; n < kMaxMessagesPerTurn && ReceiveMultipart(control_, &frames); ++n) {
    if (frames.size() != 2) continue;
    std::string routing = frames[0].to_string();
    WorkerSlot* slot = FindSlotByRoutingId(routing);
    json message = json::parse(frames[1].to_string_view(), nullptr, false);
    if (!slot || !message.is_object()) {
      TF_LOG(kDebug) << "control message from an unknown or stale worker dropped" << Kv("from", routing);
      continue;
    }
    TimePoint now = clock_.Now();
    slot->OnMessage(now);
    std::string type = message.value("type", "");
    if (type == ipc::kMsgHeartbeat) {
      control_.send(zmq::buffer(routing), zmq::send_flags::sndmore);
      control_.send(zmq::str_buffer(R"({"type":"ack"})"), zmq::send_flags::none);
    } else if (type == ipc::kMsgHello) {
      slot->OnHello(now);
      int version = message.value("layout_version", 0);
      if (version != static_cast<int>(ipc::kLayoutVersion)) {
        TF_LOG(kError) << "worker speaks another shared-memory layout; killing it"
                       << Kv("worker", slot->id()) << Kv("worker_layout", version)
                       << Kv("supervisor_layout", ipc::kLayoutVersion);
        ::kill(slot->pid(), SIGKILL);
      }
    } else if (type == ipc::kMsgReady && slot->state() == SlotState::kStarting) {
      slot->OnReady(now, message.value("load_ms", 0.0));
    } else if (type == ipc::kMsgError) {
      std::string reason = message.value("message", "unknown error");
      TF_LOG(kError) << "worker reported an error" << Kv("worker", slot->id())
                     << Kv("model", slot->model_name()) << Kv("error", reason);
      if (message.value("fatal", false)) slot->OnFatalError(reason, now);
    }
  }
}

WorkerSlot* Supervisor::FindSlotByRoutingId(const std::string& routing_id) {
  for (auto& slot : slots_) {
    if (slot->pid() > 0 && ipc::WorkerRoutingId(slot->id(), slot->generation()) == routing_id) {
      return slot.get();
    }
  }
  return nullptr;
}

void Supervisor::HandleJobs() {
  std::vector<zmq::message_t> frames;
  for (int n = 0; n < kMaxMessagesPerTurn && ReceiveMultipart(jobs_, &frames); ++n) {
    AcceptJob(frames);
  }
}

void Supervisor::AcceptJob(std::vector<zmq::message_t>& frames) {
  PendingRequest request;
  size_t payload = 0;
  if (!SplitEnvelope(frames, &request, &payload)) return;
  size_t index = 0;
  Status s = ParseJob(frames, payload, config_.models, clock_.Now(), &request, &index);
  if (s.ok() && draining_) s = Unavailable("the farm is shutting down and accepts no new requests");
  if (s.ok() && !ModelAvailable(models_[index])) {
    FailModelIfNoWorkers(models_[index]);
    std::string reason;
    for (size_t i : models_[index].slots) {
      if (!slots_[i]->failure_reason().empty()) reason = slots_[i]->failure_reason();
    }
    s = Unavailable("model '" + models_[index].config.name + "' has no live worker: " + reason);
  }
  if (s.ok() && !models_[index].queue.Push(request)) {
    s = ResourceExhausted("queue of model '" + models_[index].config.name + "' is full (" +
                          std::to_string(models_[index].queue.policy().max_queue_size) +
                          " requests, max_queue_size); retry later");
  }
  if (!s.ok()) {
    if (index < models_.size()) ++models_[index].rejected;
    ReplyError(request, s);
  }
}

void Supervisor::ExpireDeadlines() {
  TimePoint now = clock_.Now();
  for (auto& model : models_) {
    auto next = model.queue.NextDeadline();
    if (!next || *next > now) continue;
    for (auto& r : model.queue.TakeExpired(now)) {
      ++model.errors;
      ReplyError(r, Status(StatusCode::kDeadlineExceeded,
                           "timeout_ms expired after " +
                               std::to_string(ToMicros(now - r.received) / 1000) +
                               " ms in the queue of model '" + model.config.name + "'"));
    }
  }
}

void Supervisor::CheckWorkerLiveness() {
  TimePoint now = clock_.Now();
  auto limit = Millis(config_.heartbeat_ms) * ipc::kLivenessHeartbeats;
  for (auto& slot : slots_) {
    if (slot->LivenessExpired(now, limit)) {
      TF_LOG(kWarn) << "worker missed its heartbeats; killing it" << Kv("worker", slot->id())
                    << Kv("pid", slot->pid()) << Kv("silent_ms", ToMicros(now - slot->last_heard()) / 1000);
      ::kill(slot->pid(), SIGKILL);
      slot->OnMessage(now);  // one kill per silence; the exit arrives through SIGCHLD
    }
  }
}

void Supervisor::RestartDueSlots() {
  if (draining_) return;
  TimePoint now = clock_.Now();
  for (auto& slot : slots_) {
    if (slot->RestartDue(now)) LaunchSlot(*slot);
  }
}

WorkerSlot* Supervisor::PickSlot(const Model& model) {
  WorkerSlot* best = nullptr;
  for (size_t i : model.slots) {
    WorkerSlot* slot = slots_[i].get();
    if (!slot->CanAccept()) continue;
    if (!best || slot->inflight_rows() < best->inflight_rows()) best = slot;
  }
  return best;
}

void Supervisor::Dispatch() {
  TimePoint now = clock_.Now();
  for (auto& model : models_) {
    while (!model.queue.empty()) {
      WorkerSlot* slot = PickSlot(model);
      if (!slot) break;
      std::vector<PendingRequest> requests = model.queue.TakeBatch(now);
      if (requests.empty()) break;
      InflightBatch batch;
      batch.batch_id = next_batch_id_++;
      for (const auto& r : requests) batch.rows += r.rows;
      batch.requests = std::move(requests);
      batch.dispatched = now;
      slot->Dispatch(std::move(batch));
    }
  }
}

void Supervisor::DrainStep() {
  if (!draining_) return;
  TimePoint now = clock_.Now();
  if (!stopping_workers_) {
    bool idle = true;
    for (const auto& model : models_) idle = idle && model.queue.empty();
    for (const auto& slot : slots_) idle = idle && slot->inflight() == 0;
    if (!idle && now < drain_deadline_) return;
    for (auto& model : models_) {
      for (auto& r : model.queue.TakeAll()) {
        ++model.errors;
        ReplyError(r, Unavailable("the farm shut down before this request could run"));
      }
    }
    StopWorkers();
    return;
  }
  bool all_gone = std::all_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->pid() <= 0; });
  if (all_gone) {
    done_ = true;
  } else if (now >= stop_deadline_) {
    for (auto& slot : slots_) {
      if (slot->pid() > 0) ::kill(slot->pid(), SIGKILL);
    }
    stop_deadline_ = now + kStopGrace;
  }
}

void Supervisor::StopWorkers() {
  stopping_workers_ = true;
  stop_deadline_ = clock_.Now() + kStopGrace;
  for (auto& slot : slots_) {
    if (slot->pid() <= 0) {
      slot->TransitionTo(SlotState::kStopped, "farm stopping");
      continue;
    }
    control_.send(zmq::buffer(ipc::WorkerRoutingId(slot->id(), slot->generation())), zmq::send_flags::sndmore);
    control_.send(zmq::str_buffer(R"({"type":"stop"})"), zmq::send_flags::none);
    slot->TransitionTo(SlotState::kStopping, "farm stopping");
  }
}

void Supervisor::CleanUp() {
  // Batches still held by workers (only after a forced stop) are answered, never dropped.
  for (auto& slot : slots_) {
    if (slot->pid() > 0) {
      ::kill(slot->pid(), SIGKILL);
      int status = 0;
      ::waitpid(slot->pid(), &status, 0);
      auto orphans = slot->OnExit(status, clock_.Now(), options_.restart, true);
      for (auto& batch : orphans) {
        for (auto& r : batch.requests) ReplyError(r, Unavailable("the farm shut down while this request ran"));
      }
    }
  }
  if (!control_path_.empty()) {
    ::unlink(control_path_.c_str());
    control_path_.clear();
  }
  if (config_.admin_endpoint.rfind("ipc://", 0) == 0) ::unlink(config_.admin_endpoint.substr(6).c_str());
  if (config_.endpoint.rfind("ipc://", 0) == 0) ::unlink(config_.endpoint.substr(6).c_str());
}

}  // namespace torchfarm
