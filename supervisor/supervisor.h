// The supervisor: one thread, one poll loop, every event source a named handler.
//
// Owns: the job socket (ROUTER, clients), the control socket (ROUTER, workers), the admin socket
// (ROUTER, JSON commands), the front-end socket (ROUTER on inproc://, the HTTP and gRPC front
// ends' threads; supervisor/frontend/) and those front ends, the signalfd, the loop timer, the
// run_dir lock, one ModelQueue per model and the WorkerPool (the table of WorkerSlots), and the
// resource limits: the job socket's connection monitor (max_connections) and the shared-memory
// budget (limits.max_shm_bytes); docs/operations.md "Limits". Never links LibTorch and never holds
// a CUDA context.
//
// Loop (Run(), in this order each turn; supervisor/README.md draws the subsystems):
//   poll(job, control, admin, signals, timerfd armed to NextWakeUp, front end, every worker's
//        doorbell and output pipe, ZAP, connection monitor, starting zygotes)
//   -> zap, connections (security/)      -> worker output (crash messages first)
//   -> signals (child exits, stop -> FarmPhase, SIGHUP reload) -> responses -> control -> jobs
//   -> front end -> admin -> deadlines -> liveness -> zygotes -> restarts -> dispatch
//   -> pinned replies -> retire (idle slots, rollouts advance) -> versions
//   -> farm phase (loop/farm_phase.h: drain, stop, kill) -> housekeeping (1 s: gauges, sd_notify,
//      watch mode)
// each inside its own exception barrier (Guarded): a failing duty is logged, the loop goes on.
//
// Every accepted request is answered exactly once: with its result, or with an error code.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <new>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/config.h"
#include "common/log.h"
#include "common/status.h"
#include "supervisor/admin/admin_service.h"
#include "supervisor/admin/metrics_exporter.h"
#include "supervisor/admin/process_stats.h"
#include "supervisor/admin/resource_metrics.h"
#include "supervisor/dispatch/dispatcher.h"
#include "supervisor/dispatch/model_queue.h"
#include "supervisor/dispatch/model_stats.h"
#include "supervisor/dispatch/reply_writer.h"
#include "supervisor/intake/client_quota.h"
#include "supervisor/intake/client_shm_registry.h"
#include "supervisor/intake/shm_budget.h"
#include "supervisor/loop/farm_phase.h"
#include "supervisor/loop/ipc_endpoint_file.h"
#include "supervisor/loop/loop_timer.h"
#include "supervisor/loop/resource_errors.h"
#include "supervisor/loop/run_dir_lock.h"
#include "supervisor/loop/service_notifier.h"
#include "supervisor/loop/signal_fd.h"
#include "supervisor/models/file_watch.h"
#include "supervisor/models/reload_plan.h"
#include "supervisor/models/rollout_policy.h"
#include "supervisor/models/scale_result.h"
#include "supervisor/models/served_model.h"
#include "supervisor/security/accept_guard.h"
#include "supervisor/security/connection_monitor.h"
#include "supervisor/security/curve_authenticator.h"
#include "supervisor/workers/mps_controller.h"
#include "supervisor/workers/worker_pool.h"
#include "supervisor/workers/worker_slot.h"
#include "supervisor/workers/zygote_pool.h"

namespace torchfarm {

struct ShmCommand;  // job_intake.h
class Frontend;     // frontend/frontend.h: linked into the binary, not into this library

struct SupervisorOptions {
  std::string log_level = "info";
  Millis drain_timeout{30'000};
  int max_retries = 2;  // times one request may be requeued after the worker holding it died
  RestartPolicy restart;

  static SupervisorOptions From(const FarmConfig& config, const std::string& log_level);
};

class Supervisor {
 public:
  Supervisor(FarmConfig config, SupervisorOptions options);
  ~Supervisor();

  // Locks run_dir, binds the sockets and launches every worker. Errors name what failed.
  Status Start();
  // Serves until SIGTERM/SIGINT and the drain that follows; returns the process exit code.
  int Run();

 private:
  using Model = ServedModel;

  // Event handlers, in loop order.
  void HandleSignals();
  void HandleResponses(WorkerSlot& slot);
  void HandleControl();
  void OnControlMessage(WorkerSlot& slot, const std::string& routing, const nlohmann::json& message);
  // Sends a worker the control message to finish its batches and exit.
  void SendStop(const WorkerSlot& slot);
  void HandleJobs();
  // The front ends' requests and metadata queries (supervisor_frontend.cc).
  void HandleFrontendJobs();
  Status StartFrontend();
  // The answer to a "meta" query: HealthJson plus each model's metadata (model_metadata.h).
  nlohmann::json FrontendMetaJson() const;
  void RegisterAdminCommands();
  void HandleWorkerOutput(WorkerSlot& slot);
  void ReleasePinnedReplies();
  void RetireIdleSlots();
  // Versions a reload dropped while another version of their model was still loading: removed
  // once one is ready (supervisor_versions.cc).
  void RetireReplacedVersions();
  // Moves the farm's phase by one StepFarm and carries out its actions (drain, stop, kill).
  void StepFarmPhase(FarmEvent event);
  void Housekeeping();

  // Helpers.
  // `origin` and `client` (the quota key) are set for front-end requests; frames[0] is the
  // routing id either way.
  void AcceptJob(std::vector<zmq::message_t>& frames, RequestOrigin origin = RequestOrigin::kZmq,
                 std::string client = {});
  void RunShmCommand(PendingRequest& request, const ShmCommand& command, const std::string& client);
  // Security set-up of Start (supervisor_security.cc).
  Status SecureSockets();
  Status ApplyIpcGroup();
  void ReplyBatch(WorkerSlot& slot, InflightBatch& batch, const uint8_t* response);
  // `death`: when the loop learned of it (the SIGCHLD read), for the spare hand-over measure.
  void OnChildExit(pid_t pid, int wait_status, TimePoint death);
  void RecycleMpsPeers(const WorkerSlot& failed);
  void FailModelIfNoWorkers(Model& model);
  bool ModelAvailable(const Model& model) const;
  // The earliest batch delay, deadline, restart, liveness or housekeeping time.
  TimePoint NextWakeUp() const;
  template <typename Duty>
  void Guarded(const char* duty, Duty&& run);
  nlohmann::json HealthJson() const;
  nlohmann::json StatsJson();
  nlohmann::json WorkerJson(WorkerSlot& slot, TimePoint now);
  // Admin commands (supervisor_control.cc).
  nlohmann::json Drain();
  nlohmann::json RestartWorker(int worker_id);
  // `version` empty: the model's default version.
  ScaleResult Scale(const std::string& model, int count, const std::string& version = {});
  nlohmann::json Reload();
  // Run-time load / unload and watch mode (supervisor_lifecycle.cc).
  // {"model": NAME} loads the config file's entry NAME; {"model", "config": {...}} that entry.
  nlohmann::json Load(const nlohmann::json& request);
  nlohmann::json Unload(const std::string& name);
  nlohmann::json ModelsJson() const;
  // For a NOT_FOUND of ParseJob: true (and the message to answer) when it names a model being
  // unloaded.
  bool BeingUnloaded(const Status& not_found, std::string* message) const;
  // Housekeeping: every model_repository_poll_s, reload when a watched file changed.
  void WatchFiles(TimePoint now);
  // Applies one model's part of a reload plan (reload_plan.h); `file` is the model file now.
  // Returns what it did.
  std::string ApplyModelUpdate(const ModelUpdate& update, const FileIdentity& file);
  // Ring geometry or inputs changed: every worker stops taking batches and restarts at once.
  std::string ReplaceAllAtOnce(Model& model, const ModelUpdate& update);
  int ReadyWorkers(const Model& model) const;
  int LiveWorkers(const Model& model) const;
  void AddModel(const ModelConfig& config, FileIdentity file);
  void AddSlot(size_t model_index, const InstanceConfig& instance);
  void RetireSlot(WorkerSlot& slot, const std::string& why);
  // Warm spares (supervisor_spares.cc, policy in spare_policy.h).
  void AddSpares(size_t model_index);
  // Swaps ready spares into the places of serving workers that cannot serve; `death` (the SIGCHLD
  // of the worker it replaces) starts the hand-over measure, none for a spare that just got ready.
  void PromoteSpares(Model& model, std::optional<TimePoint> death);
  // A reload changed the model: its spares are retired and new ones started with the new config.
  void ReplaceSpares(Model& model, const std::string& why);
  void RetireSpares(Model& model, const std::string& why);
  void ReconcileSparesAfterReload(Model& model, const ModelConfig& previous,
                                  const ModelUpdate& update);
  int ReadySpares(const Model& model) const;
  // Rolling replacement (supervisor_rollout.cc, policy in rollout_policy.h).
  void StartRollout(Model& model, std::vector<size_t> outdated,
                    std::vector<InstanceConfig> replacements, const ModelConfig& previous_config,
                    const FileIdentity& previous_file, int ready_before);
  void AdvanceRollout(Model& model);
  RolloutView ViewOfRollout(Model& model);
  void FinishRollout(Model& model, RolloutState outcome, const std::string& reason);
  nlohmann::json RolloutJson(const Model& model) const;
  void RebuildServedModels();
  // Model versions (supervisor_versions.cc). FindModel: the served (name, version), or with an
  // empty `version` the default one (common/model_versions.h, SelectServedVersion); null if none.
  Model* FindModel(const std::string& name, const std::string& version = {});
  bool HasReadyWorker(const Model& model) const;
  // Whether served_configs_[index] has a ready worker: what "latest loaded" means in routing.
  bool ServedVersionLoaded(size_t served) const;
  // The versions of `name` clients may name, ascending.
  std::vector<std::string> ServedVersions(const std::string& name) const;
  void CleanUp();
  // Resource limits (supervisor_resources.cc): max_connections and limits.max_shm_bytes as the
  // config gives or derives them, at start and after a reload; their stats and metrics.
  void ApplyResourceLimits();
  ResourceReport Resources() const;
  nlohmann::json ResourcesJson() const;

  FarmConfig config_;
  SupervisorOptions options_;
  // Before the worker slots and client regions whose reservations it counts.
  ShmBudget shm_budget_{0};
  SteadyTimeSource clock_;
  TimePoint started_{};
  std::vector<IpcEndpointFile> ipc_files_;  // the socket files this process bound
  // Declared before context_ so it is destroyed after it: zmq messages of zero-copy replies point
  // into these rings until the context has freed the last of them.
  PinnedRingKeeper response_rings_;

  zmq::context_t context_;
  zmq::socket_t jobs_;
  zmq::socket_t control_;
  zmq::socket_t admin_;
  zmq::socket_t frontend_jobs_;  // bound only when a front end is configured
  ConnectionMonitor connections_{AcceptGuard::Instance()};  // the job socket's connections
  AdminService admin_service_;
  CurveAuthenticator curve_;  // ZAP handler; bound before any CURVE socket
  ClientQuota quota_;
  ReplyWriter replies_{jobs_, quota_};  // every answer, its framing and the quota it releases
  int ipc_gid_ = -1;  // config ipc_group's gid once resolved
  std::unique_ptr<ClientShmRegistry> client_shm_;
  SignalFd signals_;
  LoopTimer timer_;
  RunDirLock lock_;

  std::vector<Model> models_;
  // What clients may name: configs of the models not removed, and their index in models_.
  std::vector<ModelConfig> served_configs_;
  std::vector<size_t> served_index_;
  std::unique_ptr<MetricsExporter> metrics_;
  std::unique_ptr<ResourceMetrics> resource_metrics_;  // in metrics_'s registry
  MpsController mps_;
  ServiceNotifier notifier_;
  // After the sockets it uses (stopped in CleanUp, before the context ends).
  std::unique_ptr<Frontend> frontend_;
  TimePoint next_housekeeping_{};
  TimePoint next_backlog_sweep_{};
  uint64_t detached_replies_ = 0;  // pinned replies whose slot was copied out for their worker
  TimePoint next_watch_{};
  FileWatch file_watch_;  // watch mode's stamps of the config and model files
  std::map<pid_t, ProcessSample> process_samples_;
  // Fork workers (config worker_launch "zygote"); before workers_: outlives them.
  ZygotePool zygotes_;
  WorkerPool workers_;
  WorkerPool::HangLimit hang_limit_;  // a slot's model's hang_timeout_ms
  Dispatcher dispatcher_{models_, workers_, replies_, clock_};  // queues to workers, requeue, deadlines

  uint64_t next_rollout_id_ = 1;
  FarmState farm_;  // serving, drained, draining, stopping workers, done (loop/farm_phase.h)
};

// Each loop duty runs inside this barrier: a failing duty is logged and the loop goes on.
// Running out of descriptors or memory fails the one duty that hit it, counted and logged at a
// bounded rate (resource_errors.h), never the supervisor.
template <typename Duty>
inline void Supervisor::Guarded(const char* duty, Duty&& run) {
  try {
    run();
  } catch (const zmq::error_t& e) {
    if (IsResourceErrno(e.num())) {
      ResourceErrors::Instance().Note(duty, e.what(), clock_.Now());
    } else {
      TF_LOG(kError) << "loop duty failed; the supervisor carries on" << Kv("duty", duty)
                     << Kv("error", e.what());
    }
  } catch (const std::bad_alloc& e) {
    ResourceErrors::Instance().Note(duty, e.what(), clock_.Now());
  } catch (const std::exception& e) {
    TF_LOG(kError) << "loop duty failed; the supervisor carries on" << Kv("duty", duty)
                   << Kv("error", e.what());
  }
}

}  // namespace torchfarm
