#include "supervisor/supervisor.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <system_error>

#include "common/log.h"
#include "common/protocol.h"
#include "common/random_hex.h"
#include "common/worker_count.h"
#include "ipc/control_protocol.h"
#include "ipc/guarded_copy.h"
#include "supervisor/admin/process_stats.h"
#include "supervisor/frontend/frontend.h"
#include "supervisor/frontend/frontend_endpoint.h"
#include "supervisor/security/socket_security.h"

namespace torchfarm {

using nlohmann::json;

namespace {

constexpr Millis kMaxPollTimeout{100};
constexpr Millis kStopGrace{5'000};
constexpr Millis kZygoteStartWait{10'000};  // before the first workers launch
constexpr Millis kPinnedReplyPoll{2};
// How long a turn that only moved requests may leave the maintenance duties (supervisor.h).
constexpr Millis kMaintenanceInterval{5};

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

Supervisor::Supervisor(FarmConfig config, SupervisorOptions options, SupervisorSeams seams)
    : config_(std::move(config)),
      options_(std::move(options)),
      clock_(seams.clock ? *seams.clock : steady_clock_),
      launcher_override_(seams.launcher),
      context_(1),
      jobs_(context_, zmq::socket_type::router),
      control_(context_, zmq::socket_type::router),
      admin_(context_, zmq::socket_type::router),
      workers_(clock_),
      hang_limit_([this](const WorkerSlot& slot) {
        return Millis(models_[slot.model_index()].config.hang_timeout_ms);
      }) {
  // ReadJobs copes with a wake-up that carries no request and reports a drained socket.
  socket_watches_[kWatchedJobs].probe_by_reading = true;
  RegisterAdminCommands();
}

Supervisor::~Supervisor() { CleanUp(); }

Status Supervisor::Start() {
  started_ = clock_.Now();
  status_.set_started(started_);
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
  launch.shm_budget = &shm_budget_;
  if (::access(launch.worker_binary.c_str(), X_OK) != 0) {
    return NotFound("worker binary '" + launch.worker_binary +
                    "' is missing or not executable (set worker_binary in the config)");
  }
  if (Status s = BindSockets(launch.control_endpoint); !s.ok()) return s;
  if (Status s = StartWorkers(std::move(launch)); !s.ok()) return s;
  if (Status s = StartFrontend(); !s.ok()) return s;
  TF_LOG(kInfo) << "supervisor serving" << Kv("endpoint", config_.endpoint)
                << Kv("admin", config_.admin_endpoint) << Kv("workers", workers_.size())
                << Kv("models", config_.models.size())
                << Kv("metrics",
                      config_.metrics_endpoint.empty() ? "off" : config_.metrics_endpoint)
                << Kv("mps", mps_.state());
  return Status::Ok();
}

Status Supervisor::BindSockets(const std::string& control_endpoint) {
  for (auto* socket : {&jobs_, &control_, &admin_}) socket->set(zmq::sockopt::linger, 0);
  jobs_.set(zmq::sockopt::rcvhwm, 100'000);
  jobs_.set(zmq::sockopt::sndhwm, 100'000);
  // A reply libzmq cannot queue fails its send instead of vanishing (reply_writer.h).
  jobs_.set(zmq::sockopt::router_mandatory, 1);
  quota_.set_max_per_client(config_.limits.max_queued_per_client);
  replies_.set_unread_limits(config_.limits.max_unread_replies_per_client,
                             config_.limits.max_unread_reply_bytes_per_client);
  if (Status s = SecureSockets(config_, context_, jobs_, admin_, curve_); !s.ok()) return s;
  job_acceptor_.set_curve(curve_.started());
  // Limits first: the job socket accepts from the moment it is bound.
  limits_.Apply(config_);
  if (Status s = connections_.Start(context_, jobs_, "torchfarm-job-connections"); !s.ok()) return s;
  const std::pair<zmq::socket_t*, std::string> binds[] = {
      {&jobs_, config_.endpoint}, {&control_, control_endpoint}, {&admin_, config_.admin_endpoint}};
  for (const auto& [socket, endpoint] : binds) {
    if (Status s = CheckIpcEndpointFree(endpoint); !s.ok()) return s;
    try {
      socket->bind(endpoint);
    } catch (const zmq::error_t& e) {
      return Unavailable("cannot bind '" + endpoint + "': " + e.what());
    }
    ipc_files_.push_back(IpcEndpointFile::Bound(endpoint));
  }
  ++socket_reads_[kWatchedMonitor];
  connections_.HandleEvents();  // the LISTENING event: which descriptor the guard caps
  return ApplyIpcGroup(config_, &ipc_gid_);
}

Status Supervisor::StartWorkers(LaunchContext launch) {
  client_shm_ =
      std::make_unique<ClientShmRegistry>(config_.client_shm, launch.segment_prefix, ipc_gid_);
  client_shm_->set_budget(&shm_budget_);
  job_acceptor_.set_client_shm(client_shm_.get());
  job_acceptor_.set_system_shm(config_.frontend.system_shared_memory);
  status_.set_client_shm(client_shm_.get());
  if (!config_.metrics_endpoint.empty()) {
    if (Status m = MetricsExporter::Start(config_.metrics_endpoint, &metrics_); !m.ok()) return m;
    resource_metrics_ = std::make_unique<ResourceMetrics>(metrics_->registry());
    replies_.set_undeliverable_hook(
        [metrics = metrics_.get()](const char* reason) { metrics->ReplyUndeliverable(reason); });
  }
  dispatcher_.set_metrics(metrics_.get());
  responses_.set_metrics(metrics_.get());
  spares_.set_metrics(metrics_.get());
  rollouts_.set_metrics(metrics_.get());
  worker_events_.set_metrics(metrics_.get());
  job_acceptor_.set_metrics(metrics_.get());
  worker_events_.set_events(&events_);
  workers_.set_events(&events_);
  spares_.set_events(&events_);
  rollouts_.set_events(&events_);
  status_.set_events(&events_);
  // In place only while regions are owner-only: a region shared with an ipc_group could be
  // truncated or rewritten by another user while the model reads it (docs/security.md).
  dispatcher_.set_options(
      {options_.max_retries, config_.client_shm.in_place && config_.ipc_group.empty()});
  // Each model file is read once here, to know it again at a reload (file_identity.h).
  for (const ModelConfig& mc : config_.models) model_control_.Add(mc, ReadFileIdentity(mc.path));
  // A version is one set of bytes: no worker of it starts on a file that changed since.
  workers_.set_launch_check(
      [this](const WorkerSlot& slot) { return models_.CheckModelFile(slot); });
  models_.RebuildServed();
  int cpu_threads = 0;
  for (const auto& slot : workers_) {
    if (slot->device() == "cpu") cpu_threads += slot->instance().threads;
  }
  if (const int cores = AvailableCores(); cpu_threads > cores) {
    TF_LOG(kWarn) << "CPU workers' threads exceed the cores this supervisor may use; expect "
                     "oversubscription (set threads, count or cores)"
                  << Kv("threads", cpu_threads) << Kv("cores", cores);
  }
  const bool has_gpu_instances = std::any_of(workers_.begin(), workers_.end(), [](const auto& slot) {
    return slot->instance().is_gpu();
  });
  if (Status s = mps_.Start(config_.gpu, config_.run_dir, has_gpu_instances); !s.ok()) return s;
  launch.gpu_env = mps_.WorkerEnvironment();
  ZygotePool* zygotes = nullptr;
  if (config_.worker_launch == "zygote" && !launcher_override_) {
    // Waiting here, before any worker exists, lets the first workers fork too (their start is
    // what the wait costs); a zygote slower than this is used once it is ready.
    if (Status z = zygotes_.Start(launch.worker_binary, kZygoteStartWait, clock_); z.ok()) {
      zygotes = &zygotes_;
    } else {
      TF_LOG(kWarn) << "no worker zygote; workers start by exec" << Kv("error", z.message());
    }
  }
  process_launcher_ = std::make_unique<ProcessWorkerLauncher>(zygotes);
  launch.launcher = launcher_override_ ? launcher_override_ : process_launcher_.get();
  workers_.Configure(std::move(launch), options_.restart);
  for (auto& slot : workers_) workers_.Launch(*slot);
  return Status::Ok();
}

Status Supervisor::StartFrontend() {
  if (!config_.frontend.enabled()) return Status::Ok();
  try {
    frontend_hub_ = std::make_unique<FrontendHub>();
  } catch (const std::system_error& e) {
    return Internal(std::string("cannot make the front ends' hub: ") + e.what());
  }
  replies_.set_frontend_hub(frontend_hub_.get());
  frontend_ = std::make_unique<Frontend>();
  return frontend_->Start(config_.frontend, *frontend_hub_, config_.limits.request);
}

void Supervisor::RegisterAdminCommands() {
  using Field = AdminService::Field;
  admin_service_.Register("health", {}, [this](const json&) { return status_.Health(); });
  admin_service_.Register("stats", {}, [this](const json&) {
    json stats = status_.Stats();
    if (frontend_) stats["frontend"] = frontend_->ToJson();
    return stats;
  });
  admin_service_.Register("drain", {}, [this](const json&) {
    json reply = Drain();
    NoteAction("drain", reply);
    return reply;
  });
  admin_service_.Register("reload", {}, [this](const json&) { return Reload(); });
  admin_service_.Register("restart", {Field{"worker", false}}, [this](const json& request) {
    const int id = request["worker"].get<int>();
    const Status s = workers_.RequestRestart(id, "restart requested over the admin socket");
    if (!s.ok()) return AdminError(s.message());
    json reply = AdminOk("worker " + std::to_string(id) + " will be replaced after its " +
                         std::to_string(workers_[static_cast<size_t>(id)]->inflight()) +
                         " batch(es) in flight");
    NoteAction("restart", reply);
    return reply;
  });
  admin_service_.Register(
      "scale", {Field{"model", true}, Field{"count", false, 0, kMaxWorkersPerModel}},
      [this](const json& request) {
        const std::string model = request["model"].get<std::string>();
        json reply = ScaleReply(model_control_.Scale(model, request["count"].get<int>()));
        NoteAction("scale", reply, model);
        return reply;
      });
  admin_service_.Register("models", {}, [this](const json&) { return status_.Models(); });
  admin_service_.Register("load", {Field{"model", true}}, [this](const json& request) {
    std::vector<ModelConfig> configs;
    if (Status s = ParseLoadRequest(request, config_.source_path, &configs); !s.ok()) {
      return AdminError(s.message());
    }
    const std::string model = request["model"].get<std::string>();
    json reply = LoadReply(model_control_.Load(model, configs));
    NoteAction("load", reply, model);
    return reply;
  });
  admin_service_.Register("unload", {Field{"model", true}}, [this](const json& request) {
    const std::string model = request["model"].get<std::string>();
    json reply = UnloadReply(model_control_.Unload(model));
    NoteAction("unload", reply, model);
    return reply;
  });
}

int Supervisor::Run() {
  while (farm_.phase != FarmPhase::kDone) RunTurn(clock_.Now());
  CleanUp();
  TF_LOG(kInfo) << "supervisor stopped";
  return 0;
}

const Supervisor::TurnEvents& Supervisor::Poll(TimePoint now) {
  // The fixed poll sources, by name; the workers' doorbells and pipes follow them (owners).
  enum FixedItem : size_t { kJobs, kControl, kAdmin, kSignals, kTimer, kFrontend, kFixedItems };
  LoopPoller& poller = poller_;
  std::vector<std::pair<WorkerSlot*, PollSource>>& owners = poll_owners_;
  // Every input of the list below but the fixed sockets' handles (set once) and the watched
  // sockets' use counts (updated every turn): equal to the last turn's, the list is too.
  std::vector<intptr_t>& layout = poll_layout_scratch_;
  layout.resize(7 + 3 * workers_.size());  // written by index: push_back's calls cost more
  intptr_t* key = layout.data();
  *key++ = signals_.fd();
  *key++ = timer_.fd();
  *key++ = frontend_hub_ ? frontend_hub_->requests().fd() : -1;
  for (auto& slot : workers_) {
    *key++ = reinterpret_cast<intptr_t>(slot.get());
    *key++ = slot->response_fd();
    *key++ = slot->output_fd();
  }
  *key++ = reinterpret_cast<intptr_t>(curve_.socket_handle());  // null until started
  *key++ = reinterpret_cast<intptr_t>(connections_.socket_handle());
  for (int fd : zygotes_.StartingChannels()) *key++ = fd;
  if (layout != poll_layout_) {  // the first turn's too: poll_layout_ starts empty
    poller.Reset();
    owners.clear();
    poll_layout_.clear();  // matches no layout until the list is whole (the swap below)
    // These four live as long as the supervisor: watched, so one untouched since it last had no
    // input is asked nothing before the wait (loop_poller.h); every send and read on it counts.
    poller.AddSocket(static_cast<void*>(jobs_), &socket_watches_[kWatchedJobs], 0);
    poller.AddSocket(static_cast<void*>(control_), &socket_watches_[kWatchedControl], 0);
    poller.AddSocket(static_cast<void*>(admin_), &socket_watches_[kWatchedAdmin], 0);
    poller.AddDescriptor(signals_.fd());
    poller.AddDescriptor(timer_.fd());
    // Readable while the hub holds a request (frontend_hub.h); -1 without a front end keeps the
    // indices fixed.
    poller.AddDescriptor(frontend_hub_ ? frontend_hub_->requests().fd() : -1);
    for (auto& slot : workers_) {
      if (slot->response_fd() >= 0) {
        poller.AddDescriptor(slot->response_fd());
        owners.emplace_back(slot.get(), PollSource::kResponses);
      }
      if (slot->output_fd() >= 0) {
        poller.AddDescriptor(slot->output_fd());
        owners.emplace_back(slot.get(), PollSource::kOutput);
      }
    }
    // The ZAP socket and the monitor's reader live as long as the supervisor too: watched alike.
    zap_item_ = poller.size();
    if (curve_.started()) {
      poller.AddSocket(curve_.socket_handle(), &socket_watches_[kWatchedZap], 0);
    }
    monitor_item_ = poller.size();
    if (connections_.socket_handle()) {
      poller.AddSocket(connections_.socket_handle(), &socket_watches_[kWatchedMonitor], 0);
    }
    // A starting zygote's ready message only wakes the loop; the "zygotes" duty reads it.
    zygote_items_ = poller.size();
    for (int fd : zygotes_.StartingChannels()) {
      if (fd >= 0) poller.AddDescriptor(fd);
    }
    poll_layout_.swap(layout);  // last: a list left half built by a throw is rebuilt next turn
  }
  // The watched sockets' counts, this turn's (every send and read on one counts).
  poller.SetUses(kJobs, socket_reads_[kWatchedJobs] + replies_.jobs_sends());
  poller.SetUses(kControl, socket_reads_[kWatchedControl] + worker_events_.control_sends());
  poller.SetUses(kAdmin, socket_reads_[kWatchedAdmin]);
  const size_t zap_item = zap_item_, monitor_item = monitor_item_, zygote_items = zygote_items_;
  if (zap_item < monitor_item) poller.SetUses(zap_item, socket_reads_[kWatchedZap]);
  if (monitor_item < zygote_items) poller.SetUses(monitor_item, socket_reads_[kWatchedMonitor]);
  Guarded("timer", [&] {
    next_maintenance_ = NextMaintenance(now);
    timer_.ArmAt(NextWakeUp(now, next_maintenance_));
  });
  bool polled = false;
  Guarded("poll", [&] {
    polled = poller.Wait(std::chrono::milliseconds(-1));
    if (!polled && errno != EINTR) throw std::system_error(errno, std::generic_category(), "poll");
    polled = true;  // EINTR: nothing ready, the duties run and the next turn waits again
  });
  TurnEvents& events = turn_events_;
  events.Clear();
  if (!polled) {
    // Nothing is known to be ready; the duties still run (deadlines, restarts), and the next
    // turn polls again after the safety-net interval.
    ::usleep(static_cast<useconds_t>(ToMicros(kMaxPollTimeout)));
    return events;
  }
  if (poller.Readable(kTimer)) timer_.Acknowledge();
  events.jobs = poller.Readable(kJobs);
  events.control = poller.Readable(kControl);
  events.admin = poller.Readable(kAdmin);
  events.signals = poller.Readable(kSignals);
  events.frontend = poller.Readable(kFrontend);
  events.zap = zap_item < monitor_item && poller.Readable(zap_item);
  events.connections = connections_.socket_handle() && poller.Readable(monitor_item);
  for (size_t item = zygote_items; item < poller.size(); ++item) {
    events.zygotes = events.zygotes || poller.Readable(item);
  }
  for (size_t i = 0; i < owners.size(); ++i) {
    const size_t item = kFixedItems + i;
    if (owners[i].second == PollSource::kOutput &&
        (poller.Readable(item) || (poller.DescriptorEvents(item) & (POLLERR | POLLHUP)))) {
      events.output.push_back(owners[i].first);
    } else if (owners[i].second == PollSource::kResponses && poller.Readable(item)) {
      events.responses.push_back(owners[i].first);
    }
  }
  return events;
}

void Supervisor::RunTurn(TimePoint now) {
  const TurnEvents& events = Poll(now);
  // Each duty is one delegation inside its own barrier: a bug in one (a malformed control
  // message, an allocation failure) is logged and the loop carries on serving.
  if (events.zap) {
    ++socket_reads_[kWatchedZap];
    Guarded("zap", [&] { curve_.HandleRequests(); });
  }
  if (events.connections) {
    ++socket_reads_[kWatchedMonitor];
    Guarded("connections", [&] { connections_.HandleEvents(); });
  }
  for (WorkerSlot* slot : events.output) {
    Guarded("worker output", [&] { worker_events_.OnOutput(*slot); });
  }
  if (events.signals) Guarded("signals", [&] { HandleSignals(); });
  for (WorkerSlot* slot : events.responses) {
    Guarded("responses", [&] { responses_.Collect(*slot); });
  }
  // Each read below counts as a use of its socket (socket_reads_, Poll's watches).
  if (events.control) {
    ++socket_reads_[kWatchedControl];
    Guarded("control", [&] { worker_events_.OnControl(); });
  }
  if (events.jobs) {
    ++socket_reads_[kWatchedJobs];
    bool drained = false;
    Guarded("jobs", [&] { drained = job_acceptor_.ReadJobs(jobs_); });
    // Its last receive answered what ZMQ_EVENTS would: the next wait need not ask.
    if (drained) {
      LoopPoller::DrainedWithoutInput(&socket_watches_[kWatchedJobs],
                                      socket_reads_[kWatchedJobs] + replies_.jobs_sends());
    }
  }
  // A front end's repository load or unload, or a log setting, is control plane: it wants the
  // maintenance duties this turn (the gate below), as an admin command does.
  bool frontend_control = false;
  if (events.frontend && frontend_hub_) {
    Guarded("front end", [&] {
      job_acceptor_.ReadFrontend(*frontend_hub_, [this, &frontend_control](const json& query) {
        if (query.contains("repository")) {
          frontend_control = true;
          return repository_.Answer(query);
        }
        if (query.contains(kSystemShmQuery)) {
          return SystemShmAnswer(client_shm_.get(), config_.frontend.system_shared_memory, query);
        }
        if (query.contains("logging")) {
          frontend_control = true;
          return LogSettingsAnswer(query["logging"], config_.frontend.log_control);
        }
        auto flag = [&](const char* key) { return query.contains(key) && query[key] == true; };
        if (flag("dashboard")) {
          uint64_t after = 0;
          if (auto it = query.find("events_after"); it != query.end() && it->is_number_unsigned()) {
            after = it->get<uint64_t>();
          }
          return status_.Dashboard(after);
        }
        return status_.FrontendMeta(flag("statistics"));
      });
    });
  }
  if (events.admin) {
    ++socket_reads_[kWatchedAdmin];
    Guarded("admin", [&] { admin_service_.HandleRequests(admin_); });
  }
  // One reading of the clock for the duties below that only compare it with deadlines and limits
  // of milliseconds (a reading costs ~25 instructions; issue 36).
  const TimePoint after = clock_.Now();
  Guarded("deadlines", [&] { dispatcher_.ExpireDeadlines(after); });
  // The maintenance duties' gate (supervisor.h): every turn but one that only moved requests.
  const bool maintain = farm_.phase != FarmPhase::kServing || events.signals || events.control ||
                        events.admin || frontend_control || events.zap || events.connections ||
                        events.zygotes || !events.output.empty() || after >= next_maintenance_ ||
                        after - last_maintenance_ >= kMaintenanceInterval;
  maintenance_skipped_ = !maintain;
  if (maintain) last_maintenance_ = after;
  if (maintain) Guarded("liveness", [&] { workers_.KillUnresponsive(hang_limit_); });
  const bool stopping = IsStoppingWorkers(farm_.phase);
  // Before the restarts: a worker due now forks from a zygote that just became ready.
  if (maintain && !stopping) Guarded("zygotes", [&] { zygotes_.Maintain(after); });
  // A draining farm still replaces dead workers: the queue it promised to finish needs them.
  if (maintain && !stopping) Guarded("restarts", [&] { workers_.LaunchDue(); });
  Guarded("dispatch", [&] { dispatcher_.DispatchAll(); });
  Guarded("pinned replies", [&] { responses_.ReleasePinned(workers_, response_rings_, after); });
  if (!maintain) return;
  Guarded("stops", [&] { worker_events_.SendDueStops(); });
  if (!stopping) Guarded("rollouts", [&] { rollouts_.AdvanceAll(); });
  Guarded("retire", [&] { model_control_.RetireIdle(); });
  Guarded("failed loads", [&] { model_control_.DropFailedLoads(); });
  Guarded("reclaim", [&] { model_control_.ReclaimRemoved(); });
  Guarded("versions", [&] { model_control_.RetireReplacedVersions(); });
  Guarded("farm phase", [&] { StepFarmPhase(FarmEvent::kTurn, clock_.Now()); });
  Guarded("housekeeping", [&] { Housekeeping(clock_.Now()); });
}

TimePoint Supervisor::NextMaintenance(TimePoint now) const {
  TimePoint next = std::min(notifier_.next_watchdog(), next_housekeeping_);
  // An admin drain has no deadline: the farm stays up, not ready.
  if (HasDeadline(farm_.phase)) next = std::min(next, farm_.deadline);
  next = std::min(next, workers_.NextDeadline(hang_limit_, IsStoppingWorkers(farm_.phase)));
  if (!IsStoppingWorkers(farm_.phase)) next = std::min(next, zygotes_.NextDeadline(now));
  // A turn skipped them: they run by the interval's end even if nothing else wakes the loop.
  if (maintenance_skipped_) next = std::min(next, last_maintenance_ + kMaintenanceInterval);
  return next;
}

TimePoint Supervisor::NextWakeUp(TimePoint now, TimePoint maintenance) const {
  // A safety net: every deadline below is exact, but a wake-up now and then costs nothing.
  TimePoint next = std::min(now + kMaxPollTimeout, maintenance);
  // Zero-copy replies still in libzmq free their slots without waking the loop: look again soon.
  if (response_rings_.HasLivePins()) next = std::min(next, now + kPinnedReplyPoll);
  for (const auto& model : models_) {
    if (model.queue.empty()) continue;  // nothing queued: no deadline, nothing comes due
    if (auto deadline = model.queue.NextDeadline()) next = std::min(next, *deadline);
    // A batch that comes due while every worker of its model is full cannot go anyway; waking
    // for it would spin the loop (a finishing worker rings its doorbell, which wakes us).
    bool can_dispatch = std::any_of(model.slots.begin(), model.slots.end(),
                                    [&](size_t i) { return workers_[i]->CanAccept(); });
    if (!can_dispatch) continue;
    if (auto due = model.queue.NextDue()) next = std::min(next, *due);
  }
  return std::max(next, now);
}

void Supervisor::HandleSignals() {
  for (int signo : signals_.ReadPending()) {
    if (signo == SIGCHLD) {
      const TimePoint reported = clock_.Now();
      int status = 0;
      pid_t pid;
      // A barrier per child: a reaped child whose handling failed would leave its slot waiting
      // for a process that is gone.
      while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
        Guarded("child exit", [&] { worker_events_.OnChildExit(pid, status, reported); });
      }
    } else if (signo == SIGTERM || signo == SIGINT) {
      TF_LOG(kInfo) << "stop signal" << Kv("signal", SignalName(signo))
                    << Kv("phase", FarmPhaseName(farm_.phase))
                    << Kv("drain_timeout_ms", options_.drain_timeout.count());
      StepFarmPhase(FarmEvent::kStopSignal, clock_.Now());
    } else if (signo == SIGHUP) {
      TF_LOG(kInfo) << "SIGHUP: reloading the config" << Kv("config", config_.source_path);
      Guarded("reload", [&] { Reload(); });
      if (curve_.started()) Guarded("curve reload", [&] { curve_.Reload(); });  // authorized_clients_dir: admitted client keys
    }
  }
}

void Supervisor::StepFarmPhase(FarmEvent event, TimePoint now) {
  FarmObservation seen;
  if (event == FarmEvent::kTurn && farm_.phase == FarmPhase::kDraining) {
    seen.idle = std::all_of(models_.begin(), models_.end(),
                            [](const ServedModel& model) { return model.queue.empty(); }) &&
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
        dispatcher_.Fail(model, *r,
                         Unavailable("the farm shut down before this request could run"));
      }
    }
  }
  if (step.actions.stop_workers) {
    notifier_.Stopping();
    for (auto& slot : workers_) {
      if (slot->pid() > 0) worker_events_.SendStop(*slot);
      slot->BeginShutdown(now);
    }
  }
  if (step.actions.kill_workers) workers_.KillAll();
}

json Supervisor::Drain() {
  if (IsDraining(farm_.phase)) return AdminOk("already draining");
  StepFarmPhase(FarmEvent::kAdminDrain, clock_.Now());
  size_t queued = 0;
  for (const auto& model : models_) queued += model.queue.size();
  TF_LOG(kInfo) << "drain requested over the admin socket" << Kv("queued", queued);
  return AdminOk(
      "draining: " + std::to_string(queued) +
      " queued request(s) will finish; new requests get UNAVAILABLE; health is not ready");
}

json Supervisor::Reload() {
  FarmConfig fresh;
  Status s = LoadConfigFile(config_.source_path, &fresh);
  if (!s.ok()) {
    TF_LOG(kError) << "reload refused; keeping the running config" << Kv("error", s.message());
    json reply = AdminError("reload refused, the running config stays: " + s.message());
    NoteAction("reload", reply);
    return reply;
  }
  notifier_.Reloading();
  const ModelReloadReport report = model_control_.Reload(config_, fresh);
  config_.models = fresh.models;
  config_.heartbeat_ms = fresh.heartbeat_ms;
  config_.model_repository_poll_s = fresh.model_repository_poll_s;
  config_.max_retries = fresh.max_retries;
  options_.max_retries = fresh.max_retries;
  dispatcher_.set_options(
      {options_.max_retries, config_.client_shm.in_place && config_.ipc_group.empty()});
  options_.restart = RestartPolicy::From(fresh.restart);
  workers_.set_policy(options_.restart);
  workers_.set_heartbeat_ms(fresh.heartbeat_ms);
  // Request limits apply from the next request; the socket's maxmsgsize, curve, insecure and
  // ipc_group stay as bound until a restart.
  config_.limits.request.max_header_bytes = fresh.limits.request.max_header_bytes;
  config_.limits.request.max_inputs = fresh.limits.request.max_inputs;
  config_.limits.request.max_rank = fresh.limits.request.max_rank;
  config_.limits.request.max_tensor_bytes = fresh.limits.request.max_tensor_bytes;
  if (frontend_) frontend_->SetRequestLimits(config_.limits.request);
  config_.limits.max_queued_per_client = fresh.limits.max_queued_per_client;
  quota_.set_max_per_client(fresh.limits.max_queued_per_client);
  replies_.set_unread_limits(fresh.limits.max_unread_replies_per_client,
                             fresh.limits.max_unread_reply_bytes_per_client);
  config_.max_connections = fresh.max_connections;
  config_.limits.max_shm_bytes = fresh.limits.max_shm_bytes;
  limits_.Apply(config_);
  std::string summary;
  for (const auto& n : report.notes) summary += (summary.empty() ? "" : "; ") + n;
  TF_LOG(kInfo) << "config reloaded" << Kv("changes", summary);
  json reply = AdminOk("reloaded: " + summary);
  json rollouts = json::array();  // the rolling replacements this reload started
  for (const auto& [model, rollout] : report.rollouts)
    rollouts.push_back(RolloutJson(model, rollout));
  reply["rollouts"] = std::move(rollouts);
  NoteAction("reload", reply);
  return reply;
}

void Supervisor::NoteAction(const char* kind, const json& reply, const std::string& model) {
  const bool ok = reply.value("ok", false);
  std::string text = ok ? reply.value("message", "") : "refused: " + reply.value("error", "");
  // The dashboard is read over HTTP: messages that quote a file name keep only its last part.
  events_.Add(kind, RedactPaths(text), model);
}

void Supervisor::NoteRefusedConnections() {
  const ResourceReport r = limits_.Report();
  const uint64_t refused = r.refused_max_connections + r.refused_descriptor_reserve;
  if (refused <= refused_seen_) {
    refused_seen_ = refused;
    return;
  }
  events_.Add("refused", std::to_string(refused - refused_seen_) +
                             " connection(s) refused as they arrived (" +
                             std::to_string(r.refused_max_connections) + " at max_connections " +
                             std::to_string(r.max_connections) + ", " +
                             std::to_string(r.refused_descriptor_reserve) +
                             " at the descriptor reserve, since start)");
  refused_seen_ = refused;
}

void Supervisor::WatchFiles(TimePoint now) {
  if (config_.model_repository_poll_s <= 0 || now < next_watch_) return;
  next_watch_ = now + std::chrono::seconds(config_.model_repository_poll_s);
  for (const auto& model : models_) {
    // A reload during a rollout leaves that model alone; look again once it is over.
    if (model.rollout.state == RolloutState::kRolling) return;
  }
  const std::vector<std::string> changed =
      file_watch_.Scan(model_control_.WatchedPaths(config_.source_path));
  if (changed.empty() || IsDraining(farm_.phase)) return;
  std::string what;
  for (const auto& line : changed) what += (what.empty() ? "" : "; ") + line;
  TF_LOG(kInfo) << "watched files changed; reloading (model_repository_poll_s)"
                << Kv("changed", what);
  const json reply = Reload();
  if (!reply.value("ok", false)) {
    TF_LOG(kWarn) << "reload after a file change refused" << Kv("error", reply.value("error", ""));
  }
  // The reload may have loaded or dropped models: remember their files as they are now.
  file_watch_.Scan(model_control_.WatchedPaths(config_.source_path));
}

void Supervisor::Housekeeping(TimePoint now) {
  notifier_.Tick(now);
  if (now < next_housekeeping_) return;
  next_housekeeping_ = now + std::chrono::seconds(1);
  if (client_shm_) client_shm_->ExpireIdle(now);
  if (metrics_) metrics_->MpsActive(mps_.active());
  if (metrics_ && zygotes_.enabled()) {
    for (const Zygote* z : {&zygotes_.primary(), &zygotes_.standby()}) {
      metrics_->Zygote(ZygoteRoleName(z->role()), z->ready(), z->restarts(), z->launches());
    }
  }
  connections_.Report(now);
  NoteRefusedConnections();
  if (resource_metrics_) resource_metrics_->Export(limits_.Report());
  WatchFiles(now);
  ExportGauges(now);
}

void Supervisor::ExportGauges(TimePoint now) {
  bool all_ready = true;
  std::ostringstream status;
  double rps = 0;
  for (auto& model : models_) {
    if (model.removed) continue;
    std::map<std::string, int> states;
    int ready = 0;
    for (size_t i : model.slots) {
      WorkerSlot& slot = *workers_[i];
      ++states[SlotStateName(slot.state())];
      ready += slot.state() == SlotState::kReady;
      if (metrics_) {
        metrics_->GpuFallback(slot.id(), slot.model_name(), slot.model_version(),
                              slot.fallen_back());
        if (auto sample = SampleProcess(slot.pid(), now)) {
          metrics_->WorkerRss(slot.id(), slot.model_name(), slot.model_version(),
                              sample->rss_bytes);
        }
        const DeviceTelemetry& t = slot.telemetry;
        metrics_->WorkerStageSeconds(slot.id(), slot.model_name(), slot.model_version(),
                                     t.h2d_us * 1e-6, t.compute_us * 1e-6, t.d2h_us * 1e-6);
        if (t.memory_allocated >= 0) {
          metrics_->WorkerGpuMemory(slot.id(), slot.model_name(), slot.model_version(),
                                    t.memory_allocated, t.memory_reserved);
        }
      }
    }
    if (metrics_) {
      metrics_->QueueDepth(model.config.name, model.config.version, model.queue.size());
      for (const char* state :
           {"starting", "ready", "draining", "stopping", "restarting", "failed", "stopped"}) {
        metrics_->Workers(model.config.name, model.config.version, state, states[state]);
      }
      metrics_->Workers(model.config.name, model.config.version, "spare",
                        models_.Tally(model).spares_ready);
    }
    all_ready = all_ready && ready > 0;
    rps += model.stats.ThroughputOver(now, 1);
    status << model.config.name << " " << ready << "/" << model.slots.size() << " ready, queue "
           << model.queue.size() << "; ";
  }
  if (all_ready && !IsDraining(farm_.phase)) notifier_.Ready();
  status << static_cast<int64_t>(rps) << " req/s" << (IsDraining(farm_.phase) ? "; draining" : "");
  notifier_.Status(status.str());
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
      auto orphans = slot->OnExit(status, clock_.Now(), workers_.policy(), true);
      for (auto& batch : orphans) {
        for (auto& r : batch.requests) {
          replies_.SendError(*r, Unavailable("the farm shut down while this request ran"));
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
