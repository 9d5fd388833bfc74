// The supervisor: the composition root of the farm. It owns the ZeroMQ context and sockets (job:
// ROUTER for clients; control: ROUTER for workers; admin: ROUTER for JSON commands; front ends'
// hub: the HTTP and gRPC front ends' threads' mailboxes), the signalfd, the loop timer,
// the run_dir lock and every collaborator, wires them in Start(), and runs the loop. Each duty
// lives in a collaborator with its own header and tests (supervisor/README.md draws them):
//   ModelTable, ModelControl, RolloutController, SpareManager   models/
//   WorkerPool (slots, launcher, zygotes, MPS)                  workers/
//   Dispatcher, ResponseHandler, ReplyWriter                    dispatch/
//   JobAcceptor, WorkerEvents                                   events/
//   FarmStatus, AdminService, MetricsExporter                   admin/
//   ResourceLimits, CurveAuthenticator, ConnectionMonitor       security/
//   FarmPhase, SignalFd, LoopTimer, RunDirLock                  loop/
// Never links LibTorch and never holds a CUDA context.
//
// One loop turn (RunTurn), in this order; each duty inside its own exception barrier (Guarded):
// a failing duty is logged and the loop goes on.
//   poll(job, control, admin, signals, timerfd armed to NextWakeUp, front end, every worker's
//        doorbell and output pipe, ZAP, connection monitor, starting zygotes)
//   -> zap, connections (security/)   -> worker output (a crash message before its exit)
//   -> signals (child exits, stop -> FarmPhase, SIGHUP reload)   -> responses -> control
//   -> jobs -> front end -> admin -> deadlines -> liveness -> zygotes -> restarts -> dispatch
//   -> pinned replies -> stops due -> rollouts -> retire idle slots -> failed loads
//   -> reclaim (removed models and stopped slots erased) -> replaced versions
//   -> farm phase (loop/farm_phase.h: drain, stop, kill) -> housekeeping (1 s: gauges, sd_notify,
//      watch mode)
// The maintenance duties (liveness, zygotes, restarts, stops due and everything after the pinned
// replies) run on a turn that had a control-plane event (signals, control, admin, a front end's
// repository or log request, worker output, ZAP, connections, a starting zygote), once one of
// their own deadlines has come (a restart, a hang, a zygote, housekeeping, the drain's), in any
// phase but serving, and otherwise at most every kMaintenanceInterval (5 ms): a turn that only
// moved requests (jobs, front end, doorbells) skips them and arms the timer for the interval's
// end (issue 36: ~1.7k instructions a request).
//
// Every accepted request is answered exactly once: with its result, or with an error code.
#pragma once

#include <array>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/config.h"
#include "common/log.h"
#include "common/status.h"
#include "supervisor/admin/admin_service.h"
#include "supervisor/admin/farm_status.h"
#include "supervisor/admin/log_settings.h"
#include "supervisor/admin/metrics_exporter.h"
#include "supervisor/admin/repository_api.h"
#include "supervisor/admin/resource_metrics.h"
#include "supervisor/dispatch/dispatcher.h"
#include "supervisor/dispatch/reply_writer.h"
#include "supervisor/dispatch/response_handler.h"
#include "supervisor/events/job_acceptor.h"
#include "supervisor/events/worker_events.h"
#include "supervisor/intake/client_quota.h"
#include "supervisor/intake/client_shm_registry.h"
#include "supervisor/intake/shm_budget.h"
#include "supervisor/intake/system_shm_api.h"
#include "supervisor/loop/duty_barrier.h"
#include "supervisor/loop/event_ring.h"
#include "supervisor/loop/farm_phase.h"
#include "supervisor/loop/frontend_hub.h"
#include "supervisor/loop/ipc_endpoint_file.h"
#include "supervisor/loop/loop_poller.h"
#include "supervisor/loop/loop_timer.h"
#include "supervisor/loop/resource_errors.h"
#include "supervisor/loop/run_dir_lock.h"
#include "supervisor/loop/service_notifier.h"
#include "supervisor/loop/signal_fd.h"
#include "supervisor/models/file_watch.h"
#include "supervisor/models/model_control.h"
#include "supervisor/models/model_table.h"
#include "supervisor/models/rollout_controller.h"
#include "supervisor/models/spare_manager.h"
#include "supervisor/security/accept_guard.h"
#include "supervisor/security/connection_monitor.h"
#include "supervisor/security/curve_authenticator.h"
#include "supervisor/security/resource_limits.h"
#include "supervisor/workers/mps_controller.h"
#include "supervisor/workers/worker_launcher.h"
#include "supervisor/workers/worker_pool.h"
#include "supervisor/workers/zygote_pool.h"

namespace torchfarm {

class Frontend;  // frontend/frontend.h: linked into the binary, not into this library

struct SupervisorOptions {
  std::string log_level = "info";
  Millis drain_timeout{30'000};
  int max_retries = 2;  // times one request may be requeued after the worker holding it died
  RestartPolicy restart;

  static SupervisorOptions From(const FarmConfig& config, const std::string& log_level);
};

// What a test replaces: the clock every duty reads, and how worker processes are made (a fake
// that forks nothing: tests/supervisor/fake_worker.h). Null: the real ones.
struct SupervisorSeams {
  const TimeSource* clock = nullptr;
  WorkerLauncher* launcher = nullptr;
};

class Supervisor {
 public:
  Supervisor(FarmConfig config, SupervisorOptions options, SupervisorSeams seams = {});
  ~Supervisor();

  // Locks run_dir, binds the sockets and launches every worker. Errors name what failed.
  Status Start();
  // Serves until SIGTERM/SIGINT and the drain that follows; returns the process exit code.
  int Run();
  // One turn of the loop at `now`: waits for events until the next timer (NextWakeUp), then runs
  // every duty once, in the order drawn above.
  void RunTurn(TimePoint now);
  FarmPhase phase() const { return farm_.phase; }
  // The ZeroMQ context of the farm's sockets, for tests.
  zmq::context_t& context() { return context_; }
  // The front ends' hub; null unless a front end is configured (tests play a channel on it).
  FrontendHub* frontend_hub() { return frontend_hub_.get(); }

 private:
  enum class PollSource { kResponses, kOutput };  // what a worker's poll item is
  // What one poll found ready. One object, filled by every Poll: its vectors keep their capacity,
  // so a turn allocates nothing.
  struct TurnEvents {
    bool jobs = false, control = false, admin = false, signals = false, frontend = false;
    bool zap = false, connections = false;
    bool zygotes = false;                // a starting zygote's channel (read by the "zygotes" duty)
    std::vector<WorkerSlot*> output;     // output pipes with something to read (or closed)
    std::vector<WorkerSlot*> responses;  // doorbells rung
    // Nothing ready; the vectors keep their memory.
    void Clear() {
      jobs = control = admin = signals = frontend = zap = connections = zygotes = false;
      output.clear();
      responses.clear();
    }
  };

  Status BindSockets(const std::string& control_endpoint);
  // Models, their slots, MPS and the zygotes; then every worker is launched.
  Status StartWorkers(LaunchContext launch);
  Status StartFrontend();
  void RegisterAdminCommands();
  // Waits, then fills turn_events_ (returned) with what is ready.
  const TurnEvents& Poll(TimePoint now);
  void HandleSignals();
  // Moves the farm's phase by one StepFarm and carries out its actions (drain, stop, kill).
  void StepFarmPhase(FarmEvent event, TimePoint now);
  nlohmann::json Drain();
  // The config file again (SIGHUP, admin `reload`, watch mode): farm-wide settings here, the
  // models' part by ModelControl.
  nlohmann::json Reload();
  void Housekeeping(TimePoint now);
  // Connections refused since the last housekeeping (max_connections, descriptor reserve), as
  // one event of the ring.
  void NoteRefusedConnections();
  // An admin action's outcome as an event of the ring ("reload", "drain", ...).
  void NoteAction(const char* kind, const nlohmann::json& reply, const std::string& model = {});
  // Per-model gauges (Prometheus) and the status line systemd shows.
  void ExportGauges(TimePoint now);
  // Every model_repository_poll_s: reload when a watched file changed.
  void WatchFiles(TimePoint now);
  // The earliest batch delay, deadline, restart, liveness or housekeeping time; `maintenance` is
  // NextMaintenance's answer for the same `now`.
  TimePoint NextWakeUp(TimePoint now, TimePoint maintenance) const;
  // When a maintenance duty is next due by its own clock (a restart, a hang limit, a zygote,
  // housekeeping, the drain's deadline), or the skipped maintenance's interval ends.
  TimePoint NextMaintenance(TimePoint now) const;
  template <typename Duty>
  void Guarded(const char* duty, Duty&& run) {
    RunGuarded(duty, clock_, std::forward<Duty>(run));
  }
  void CleanUp();

  FarmConfig config_;
  SupervisorOptions options_;
  // Before the worker slots and client regions whose reservations it counts.
  ShmBudget shm_budget_{0};
  SteadyTimeSource steady_clock_;
  const TimeSource& clock_;
  WorkerLauncher* launcher_override_;
  std::unique_ptr<ProcessWorkerLauncher> process_launcher_;
  TimePoint started_{};
  std::vector<IpcEndpointFile> ipc_files_;  // the socket files this process bound
  // Declared before context_ so it is destroyed after it: zmq messages of zero-copy replies point
  // into these rings until the context has freed the last of them.
  PinnedRingKeeper response_rings_;

  zmq::context_t context_;
  zmq::socket_t jobs_;
  zmq::socket_t control_;
  zmq::socket_t admin_;
  // Where the front ends' threads hand in requests and take replies; made only when a front end
  // is configured. Declared before frontend_, whose channels use it until they stop.
  std::unique_ptr<FrontendHub> frontend_hub_;
  ConnectionMonitor connections_{AcceptGuard::Instance()};  // the job socket's connections
  AdminService admin_service_;
  CurveAuthenticator curve_;  // ZAP handler; bound before any CURVE socket
  ClientQuota quota_;
  ReplyWriter replies_{jobs_, quota_};  // every answer, its framing and the quota it releases
  int ipc_gid_ = -1;  // config ipc_group's gid once resolved
  std::unique_ptr<ClientShmRegistry> client_shm_;
  SignalFd signals_;
  LoopTimer timer_;
  // The loop's wait and the worker each descriptor after the fixed items belongs to; kept
  // between turns so a turn allocates nothing (Poll).
  LoopPoller poller_;
  // jobs_, control_, admin_, the connection monitor's reader and the ZAP socket, in that order
  // (kWatched*): the poller's watch of each and the turns whose handler read it. A socket's use
  // count for the watch is its reads plus the sends its owner counts (ReplyWriter for jobs_,
  // WorkerEvents for control_; AdminService and the ZAP handler
  // answer only within their read, the monitor only reads). Code that sends or receives on one of
  // these anywhere else must count there too, or a message can wait for the next wake-up (Poll).
  enum WatchedSocket : size_t {
    kWatchedJobs,
    kWatchedControl,
    kWatchedAdmin,
    kWatchedMonitor,
    kWatchedZap,
    kWatchedSockets
  };
  std::array<LoopPoller::SocketWatch, kWatchedSockets> socket_watches_{};
  std::array<uint64_t, kWatchedSockets> socket_reads_{};
  std::vector<std::pair<WorkerSlot*, PollSource>> poll_owners_;
  // What the poll list was built from (Poll): every descriptor and socket handle in it, in
  // order. While a turn finds the same, the list is reused and only the watched sockets' use
  // counts are brought up to date (issue 36: rebuilding it cost ~250 instructions a turn).
  std::vector<intptr_t> poll_layout_, poll_layout_scratch_;
  size_t zap_item_ = 0, monitor_item_ = 0, zygote_items_ = 0;  // indices in that list
  TurnEvents turn_events_;
  RunDirLock lock_;
  std::unique_ptr<MetricsExporter> metrics_;
  std::unique_ptr<ResourceMetrics> resource_metrics_;  // in metrics_'s registry
  MpsController mps_;
  ServiceNotifier notifier_;
  // After the sockets it uses (stopped in CleanUp, before the context ends).
  std::unique_ptr<Frontend> frontend_;
  TimePoint next_housekeeping_{};
  // The maintenance duties' gate (RunTurn): when they last ran, whether a turn skipped them since,
  // and NextMaintenance as this turn's poll computed it.
  TimePoint last_maintenance_{};
  bool maintenance_skipped_ = false;
  TimePoint next_maintenance_{};
  TimePoint next_watch_{};
  FileWatch file_watch_;  // watch mode's stamps of the config and model files
  // Fork workers (config worker_launch "zygote"); before workers_: outlives them.
  ZygotePool zygotes_;
  WorkerPool workers_;
  FarmState farm_;  // serving, drained, draining, stopping workers, done (loop/farm_phase.h)
  // The farm's recent events, newest last (the dashboard's list; loop/event_ring.h).
  EventRing events_;
  uint64_t refused_seen_ = 0;  // connections refused, as of the last NoteRefusedConnections

  // The collaborators, each with the narrow set of the above it works on.
  ModelTable models_{workers_, clock_};
  WorkerPool::HangLimit hang_limit_;  // a slot's model's hang_timeout_ms
  Dispatcher dispatcher_{models_.models(), workers_, replies_, clock_};
  ResponseHandler responses_{models_.models(), dispatcher_, replies_, clock_};
  SpareManager spares_{models_, workers_, farm_};
  RolloutController rollouts_{models_, workers_, spares_, clock_};
  ModelControl model_control_{models_, workers_, spares_, rollouts_, farm_};
  WorkerEvents worker_events_{{models_, workers_, dispatcher_, responses_, spares_, zygotes_, mps_,
                               control_, farm_, clock_}};
  JobAcceptor job_acceptor_{
      {models_, dispatcher_, replies_, farm_, config_.limits.request, clock_}};
  ResourceLimits limits_{shm_budget_, connections_};
  FarmStatus status_{{config_, models_, workers_, dispatcher_, replies_, responses_, zygotes_, mps_,
                      farm_, limits_, clock_}};
  RepositoryApi repository_{config_, status_, model_control_, models_};  // v2 model repository
};

}  // namespace torchfarm
