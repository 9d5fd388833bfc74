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
#include "common/random_hex.h"
#include "ipc/control_protocol.h"
#include "ipc/guarded_copy.h"
#include "supervisor/frontend/frontend.h"
#include "supervisor/intake/job_intake.h"
#include "supervisor/zmq_util.h"

namespace torchfarm {

using nlohmann::json;

namespace {

constexpr Millis kMaxPollTimeout{100};
constexpr Millis kStopGrace{5'000};
constexpr Millis kZygoteStartWait{10'000};  // before the first workers launch
constexpr Millis kPinnedReplyPoll{2};

std::string SelfDirectory() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

}  // namespace

SupervisorOptions SupervisorOptions::From(const FarmConfig& config, const std::string& log_level) {
  SupervisorOptions options;
  options.log_level = log_level;
  options.drain_timeout = Millis(config.drain_timeout_ms);
  options.max_retries = config.max_retries;
  options.restart = RestartPolicy::From(config.restart);
  return options;
}

Supervisor::Supervisor(FarmConfig config, SupervisorOptions options)
    : config_(std::move(config)), options_(std::move(options)), context_(1),
      jobs_(context_, zmq::socket_type::router), control_(context_, zmq::socket_type::router),
      admin_(context_, zmq::socket_type::router),
      frontend_jobs_(context_, zmq::socket_type::router), workers_(clock_),
      hang_limit_([this](const WorkerSlot& slot) {
        return Millis(models_[slot.model_index()].config.hang_timeout_ms);
      }) {
  RegisterAdminCommands();
}

Supervisor::~Supervisor() { CleanUp(); }

Status Supervisor::Start() {
  started_ = clock_.Now();
  ::umask(077);  // ipc socket files and every file in run_dir: owner only
  if (Status s = lock_.Acquire(config_.run_dir); !s.ok()) return s;
  RemoveStaleFiles(config_.run_dir);
  if (Status s = signals_.Open({SIGCHLD, SIGTERM, SIGINT, SIGHUP}); !s.ok()) return s;
  if (Status s = timer_.Open(); !s.ok()) return s;
  ::signal(SIGPIPE, SIG_IGN);
  ipc::InstallBusGuard();  // a client that truncates its region fails its request, not the farm

  LaunchContext launch;
  launch.control_endpoint =
      "ipc://" + config_.run_dir + "/control-" + std::to_string(::getpid()) + ".sock";
  launch.worker_binary = config_.worker_binary.empty() ? SelfDirectory() + "/torchfarm-worker"
                                                        : config_.worker_binary;
  // The pid keeps RemoveStaleFiles working; the random part makes the names unguessable, so no
  // other user can pre-create or predict a segment (docs/security.md).
  std::string nonce;
  if (Status s = RandomHex(8, &nonce); !s.ok()) return s;
  launch.segment_prefix = "torchfarm-" + std::to_string(::getpid()) + "-" + nonce + "-";
  launch.heartbeat_ms = config_.heartbeat_ms;
  launch.log_level = options_.log_level;
  launch.response_rings = &response_rings_;
  if (::access(launch.worker_binary.c_str(), X_OK) != 0) {
    return NotFound("worker binary '" + launch.worker_binary +
                    "' is missing or not executable (set worker_binary in the config)");
  }

  for (auto* socket : {&jobs_, &control_, &admin_}) socket->set(zmq::sockopt::linger, 0);
  jobs_.set(zmq::sockopt::rcvhwm, 100'000);
  jobs_.set(zmq::sockopt::sndhwm, 100'000);
  // A reply libzmq cannot queue fails its send instead of vanishing (reply_writer.h).
  jobs_.set(zmq::sockopt::router_mandatory, 1);
  if (Status s = SecureSockets(); !s.ok()) return s;
  // Limits first: the job socket accepts from the moment it is bound.
  ApplyResourceLimits();
  launch.shm_budget = &shm_budget_;
  if (Status s = connections_.Start(context_, jobs_, "torchfarm-job-connections"); !s.ok()) return s;
  const std::pair<zmq::socket_t*, std::string> binds[] = {
      {&jobs_, config_.endpoint}, {&control_, launch.control_endpoint}, {&admin_, config_.admin_endpoint}};
  for (const auto& [socket, endpoint] : binds) {
    if (Status s = CheckIpcEndpointFree(endpoint); !s.ok()) return s;
    try {
      socket->bind(endpoint);
    } catch (const zmq::error_t& e) {
      return Unavailable("cannot bind '" + endpoint + "': " + e.what());
    }
    ipc_files_.push_back(IpcEndpointFile::Bound(endpoint));
  }
  connections_.HandleEvents();  // the LISTENING event: which descriptor the guard caps
  if (Status s = ApplyIpcGroup(); !s.ok()) return s;
  client_shm_ = std::make_unique<ClientShmRegistry>(config_.client_shm, launch.segment_prefix,
                                                    ipc_gid_);
  client_shm_->set_budget(&shm_budget_);

  if (!config_.metrics_endpoint.empty()) {
    if (Status m = MetricsExporter::Start(config_.metrics_endpoint, &metrics_); !m.ok()) return m;
    resource_metrics_ = std::make_unique<ResourceMetrics>(metrics_->registry());
    replies_.set_undeliverable_hook(
        [metrics = metrics_.get()](const char* reason) { metrics->ReplyUndeliverable(reason); });
  }
  dispatcher_.set_metrics(metrics_.get());
  // In place only while regions are owner-only: a region shared with an ipc_group could be
  // truncated or rewritten by another user while the model reads it (docs/security.md).
  dispatcher_.set_options({options_.max_retries, config_.client_shm.in_place && config_.ipc_group.empty()});
  int cores = AvailableCores();
  // Each model file is read once here, to know it again at a reload (file_identity.h).
  for (const ModelConfig& mc : config_.models) AddModel(mc, ReadFileIdentity(mc.path));
  RebuildServedModels();
  int cpu_threads = 0;
  for (const auto& slot : workers_) {
    if (slot->device() == "cpu") cpu_threads += slot->instance().threads;
  }
  if (cpu_threads > cores) {
    TF_LOG(kWarn) << "CPU workers' threads exceed the cores this supervisor may use; expect "
                     "oversubscription (set threads, count or cores)"
                  << Kv("threads", cpu_threads) << Kv("cores", cores);
  }
  const bool has_gpu_instances = std::any_of(workers_.begin(), workers_.end(), [](const auto& slot) {
    return slot->instance().is_gpu();
  });
  if (Status s = mps_.Start(config_.gpu, config_.run_dir, has_gpu_instances); !s.ok()) return s;
  launch.gpu_env = mps_.WorkerEnvironment();
  if (config_.worker_launch == "zygote") {
    // Waiting here, before any worker exists, lets the first workers fork too (their start is
    // what the wait costs); a zygote slower than this is used once it is ready.
    if (Status z = zygotes_.Start(launch.worker_binary, kZygoteStartWait, clock_); z.ok()) {
      launch.zygote = &zygotes_;
    } else {
      TF_LOG(kWarn) << "no worker zygote; workers start by exec" << Kv("error", z.message());
    }
  }
  workers_.Configure(std::move(launch), options_.restart);
  for (auto& slot : workers_) workers_.Launch(*slot);
  if (Status s = StartFrontend(); !s.ok()) return s;
  TF_LOG(kInfo) << "supervisor serving" << Kv("endpoint", config_.endpoint)
                << Kv("admin", config_.admin_endpoint) << Kv("workers", workers_.size())
                << Kv("models", config_.models.size())
                << Kv("metrics", config_.metrics_endpoint.empty() ? "off" : config_.metrics_endpoint)
                << Kv("mps", mps_.state());
  return Status::Ok();
}

int Supervisor::Run() {
  enum class Source { kResponses, kOutput };
  std::vector<zmq::pollitem_t> items;
  std::vector<std::pair<WorkerSlot*, Source>> owners;
  // The fixed poll sources, by name; the workers' doorbells and pipes follow them (owners).
  enum FixedItem : size_t { kJobs, kControl, kAdmin, kSignals, kTimer, kFrontend, kFixedItems };
  while (farm_.phase != FarmPhase::kDone) {
    items.clear();
    owners.clear();
    items.push_back({static_cast<void*>(jobs_), 0, ZMQ_POLLIN, 0});
    items.push_back({static_cast<void*>(control_), 0, ZMQ_POLLIN, 0});
    items.push_back({static_cast<void*>(admin_), 0, ZMQ_POLLIN, 0});
    items.push_back({nullptr, signals_.fd(), ZMQ_POLLIN, 0});
    items.push_back({nullptr, timer_.fd(), ZMQ_POLLIN, 0});
    // An unbound socket never becomes readable: polling it always keeps the indices fixed.
    items.push_back({static_cast<void*>(frontend_jobs_), 0, ZMQ_POLLIN, 0});
    for (auto& slot : workers_) {
      if (slot->response_fd() >= 0) {
        items.push_back({nullptr, slot->response_fd(), ZMQ_POLLIN, 0});
        owners.emplace_back(slot.get(), Source::kResponses);
      }
      if (slot->output_fd() >= 0) {
        items.push_back({nullptr, slot->output_fd(), ZMQ_POLLIN, 0});
        owners.emplace_back(slot.get(), Source::kOutput);
      }
    }
    const size_t zap_item = items.size();
    if (curve_.started()) items.push_back({curve_.socket_handle(), 0, ZMQ_POLLIN, 0});
    const size_t monitor_item = items.size();
    if (connections_.socket_handle()) items.push_back({connections_.socket_handle(), 0, ZMQ_POLLIN, 0});
    // A starting zygote's ready message only wakes the loop; the "zygotes" duty reads it.
    for (int fd : zygotes_.StartingChannels()) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});
    Guarded("timer", [&] { timer_.ArmAt(NextWakeUp()); });
    bool polled = false;
    Guarded("poll", [&] {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(-1));
      polled = true;
    });
    if (!polled) {
      // Nothing is known to be ready; the duties below still run (deadlines, restarts), and the
      // next turn polls again after the safety-net interval.
      for (auto& item : items) item.revents = 0;
      ::usleep(static_cast<useconds_t>(ToMicros(kMaxPollTimeout)));
    }
    if (items[kTimer].revents & ZMQ_POLLIN) timer_.Acknowledge();
    if (zap_item < items.size() && (items[zap_item].revents & ZMQ_POLLIN)) {
      Guarded("zap", [&] { curve_.HandleRequests(); });
    }
    if (monitor_item < items.size() && (items[monitor_item].revents & ZMQ_POLLIN)) {
      Guarded("connections", [&] { connections_.HandleEvents(); });
    }

    // Each duty is one delegation inside its own barrier: a bug in one (a malformed control
    // message, an allocation failure) is logged and the loop carries on serving.
    for (size_t i = 0; i < owners.size(); ++i) {
      if (!(items[kFixedItems + i].revents & (ZMQ_POLLIN | ZMQ_POLLERR))) continue;
      if (owners[i].second == Source::kOutput) {
        Guarded("worker output", [&] { HandleWorkerOutput(*owners[i].first); });
      }
    }
    if (items[kSignals].revents & ZMQ_POLLIN) Guarded("signals", [&] { HandleSignals(); });
    for (size_t i = 0; i < owners.size(); ++i) {
      if (owners[i].second == Source::kResponses && (items[kFixedItems + i].revents & ZMQ_POLLIN)) {
        Guarded("responses", [&] { HandleResponses(*owners[i].first); });
      }
    }
    if (items[kControl].revents & ZMQ_POLLIN) Guarded("control", [&] { HandleControl(); });
    if (items[kJobs].revents & ZMQ_POLLIN) Guarded("jobs", [&] { HandleJobs(); });
    if (items[kFrontend].revents & ZMQ_POLLIN) Guarded("front end", [&] { HandleFrontendJobs(); });
    if (items[kAdmin].revents & ZMQ_POLLIN) {
      Guarded("admin", [&] { admin_service_.HandleRequests(admin_); });
    }
    Guarded("deadlines", [&] { dispatcher_.ExpireDeadlines(); });
    Guarded("liveness", [&] { workers_.KillUnresponsive(hang_limit_); });
    // Before the restarts: a worker due now forks from a zygote that just became ready.
    Guarded("zygotes", [&] {
      if (!IsStoppingWorkers(farm_.phase)) zygotes_.Maintain(clock_.Now());
    });
    Guarded("restarts", [&] {
      // A draining farm still replaces dead workers: the queue it promised to finish needs them.
      if (!IsStoppingWorkers(farm_.phase)) workers_.LaunchDue();
    });
    Guarded("dispatch", [&] { dispatcher_.DispatchAll(); });
    Guarded("pinned replies", [&] { ReleasePinnedReplies(); });
    Guarded("retire", [&] { RetireIdleSlots(); });
    Guarded("versions", [&] { RetireReplacedVersions(); });
    Guarded("farm phase", [&] { StepFarmPhase(FarmEvent::kTurn); });
    Guarded("housekeeping", [&] { Housekeeping(); });
  }
  CleanUp();
  TF_LOG(kInfo) << "supervisor stopped";
  return 0;
}

TimePoint Supervisor::NextWakeUp() const {
  TimePoint now = clock_.Now();
  // A safety net: every deadline below is exact, but a wake-up now and then costs nothing.
  TimePoint next = std::min(now + kMaxPollTimeout, notifier_.next_watchdog());
  next = std::min(next, next_housekeeping_);
  // Zero-copy replies still in libzmq free their slots without waking the loop: look again soon.
  if (response_rings_.HasLivePins()) next = std::min(next, now + kPinnedReplyPoll);
  // An admin drain has no deadline: the farm stays up, not ready.
  if (HasDeadline(farm_.phase)) next = std::min(next, farm_.deadline);
  for (const auto& model : models_) {
    if (auto deadline = model.queue.NextDeadline()) next = std::min(next, *deadline);
    // A batch that comes due while every worker of its model is full cannot go anyway; waking
    // for it would spin the loop (a finishing worker rings its doorbell, which wakes us).
    bool can_dispatch = std::any_of(model.slots.begin(), model.slots.end(),
                                    [&](size_t i) { return workers_[i]->CanAccept(); });
    if (!can_dispatch) continue;
    if (auto due = model.queue.NextDue()) next = std::min(next, *due);
  }
  next = std::min(next, workers_.NextDeadline(hang_limit_, IsStoppingWorkers(farm_.phase)));
  if (!IsStoppingWorkers(farm_.phase)) next = std::min(next, zygotes_.NextDeadline(now));
  return std::max(next, now);
}

void Supervisor::HandleSignals() {
  for (int signo : signals_.ReadPending()) {
    if (signo == SIGCHLD) {
      const TimePoint reported = Clock::now();
      int status = 0;
      pid_t pid;
      // A barrier per child: a reaped child whose handling failed would leave its slot waiting
      // for a process that is gone.
      while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
        Guarded("child exit", [&] { OnChildExit(pid, status, reported); });
      }
    } else if (signo == SIGTERM || signo == SIGINT) {
      TF_LOG(kInfo) << "stop signal" << Kv("signal", SignalName(signo))
                    << Kv("phase", FarmPhaseName(farm_.phase))
                    << Kv("drain_timeout_ms", options_.drain_timeout.count());
      StepFarmPhase(FarmEvent::kStopSignal);
    } else if (signo == SIGHUP) {
      TF_LOG(kInfo) << "SIGHUP: reloading the config" << Kv("config", config_.source_path);
      Guarded("reload", [&] { Reload(); });
      if (curve_.started()) Guarded("curve reload", [&] { curve_.Reload(); });  // authorized_clients_dir: admitted client keys
    }
  }
}

void Supervisor::StepFarmPhase(FarmEvent event) {
  const TimePoint now = clock_.Now();
  FarmObservation seen;
  if (event == FarmEvent::kTurn && farm_.phase == FarmPhase::kDraining) {
    seen.idle = std::all_of(models_.begin(), models_.end(),
                            [](const Model& model) { return model.queue.empty(); }) &&
                std::all_of(workers_.begin(), workers_.end(),
                            [](const auto& slot) { return slot->inflight() == 0; });
  }
  if (event == FarmEvent::kTurn && farm_.phase == FarmPhase::kStoppingWorkers) {
    seen.workers_exited = workers_.AllExited();
  }
  const FarmStep step = StepFarm(farm_, event, seen, now, {options_.drain_timeout, kStopGrace});
  if (*step.actions.what) {
    TF_LOG(kInfo) << step.actions.what << Kv("from", FarmPhaseName(farm_.phase))
                  << Kv("to", FarmPhaseName(step.next.phase));
  }
  farm_ = step.next;
  if (step.actions.notify_stopping) notifier_.Stopping();
  if (step.actions.fail_queued) {
    for (auto& model : models_) {
      for (auto& r : model.queue.TakeAll()) {
        dispatcher_.Fail(model, r, Unavailable("the farm shut down before this request could run"));
      }
    }
  }
  if (step.actions.stop_workers) {
    notifier_.Stopping();
    for (auto& slot : workers_) {
      if (slot->pid() > 0) SendStop(*slot);
      slot->BeginShutdown(now);
    }
  }
  if (step.actions.kill_workers) workers_.KillAll();
}

void Supervisor::CleanUp() {
  // The drain answered every front-end request; the front ends get a moment to pass the last
  // answers on before their threads stop.
  if (frontend_) frontend_->Stop(Millis(1'000));
  zygotes_.Stop(clock_.Now());
  // Batches still held by workers (only after a forced stop) are answered, never dropped.
  for (auto& slot : workers_) {
    if (slot->pid() > 0) {
      ::kill(slot->pid(), SIGKILL);
      int status = 0;
      ::waitpid(slot->pid(), &status, 0);
      auto orphans = slot->OnExit(status, clock_.Now(), options_.restart, true);
      for (auto& batch : orphans) {
        for (auto& r : batch.requests) {
          replies_.SendError(r, Unavailable("the farm shut down while this request ran"));
        }
      }
    }
  }
  if (client_shm_) client_shm_->ReleaseAll();
  // Only the socket files this process bound: a supervisor refused at start (run_dir locked by a
  // live one, an endpoint in use) leaves the live farm's files alone.
  ipc_files_.clear();
}

}  // namespace torchfarm
