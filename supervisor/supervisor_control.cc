// Supervisor, changing a running farm: admin drain, graceful worker restart, scale, config
// reload (also on SIGHUP), retiring slots once idle, worker output capture, and the once-a-second
// housekeeping that feeds Prometheus gauges and systemd.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "common/log.h"
#include "common/worker_count.h"
#include "ipc/control_protocol.h"
#include "supervisor/models/reload_plan.h"
#include "supervisor/supervisor.h"

namespace torchfarm {

using nlohmann::json;

void Supervisor::RebuildServedModels() {
  served_configs_.clear();
  served_index_.clear();
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i].removed) continue;
    served_configs_.push_back(models_[i].config);
    served_index_.push_back(i);
  }
}

void Supervisor::AddSlot(size_t model_index, const InstanceConfig& instance) {
  Model& model = models_[model_index];
  model.slots.push_back(workers_.Add(model.config, instance, model_index));
}

void Supervisor::RetireSlot(WorkerSlot& slot, const std::string& why) {
  TF_LOG(kInfo) << "retiring worker" << Kv("worker", slot.id()) << Kv("model", slot.model_name())
                << Kv("why", why);
  slot.BeginRetire(why);
}

json Supervisor::Drain() {
  if (IsDraining(farm_.phase)) return AdminOk("already draining");
  StepFarmPhase(FarmEvent::kAdminDrain);
  size_t queued = 0;
  for (const auto& model : models_) queued += model.queue.size();
  TF_LOG(kInfo) << "drain requested over the admin socket" << Kv("queued", queued);
  return AdminOk(
      "draining: " + std::to_string(queued) +
      " queued request(s) will finish; new requests get UNAVAILABLE; health is not ready");
}

json Supervisor::RestartWorker(int worker_id) {
  if (worker_id < 0 || worker_id >= static_cast<int>(workers_.size()) ||
      workers_[worker_id]->retiring()) {
    return AdminError("no worker " + std::to_string(worker_id) + " (see torchfarm stats)");
  }
  WorkerSlot& slot = *workers_[worker_id];
  if (slot.state() != SlotState::kReady && slot.state() != SlotState::kStarting) {
    return AdminError("worker " + std::to_string(worker_id) + " is " + SlotStateName(slot.state()) +
                      "; only a starting or ready worker can be restarted");
  }
  slot.BeginGracefulRestart("restart requested over the admin socket");
  return AdminOk("worker " + std::to_string(worker_id) + " will be replaced after its " +
                 std::to_string(slot.inflight()) + " batch(es) in flight");
}

ScaleResult Supervisor::Scale(const std::string& name, int count, const std::string& version) {
  // The one bound of config, reload and admin alike (common/worker_count.h).
  if (Status s = CheckWorkerCount(count, "scale.count"); !s.ok()) return {s, name};
  Model* model = FindModel(name, version);
  if (!model) {
    return {
        NotFound("no model '" + name + "'" + (version.empty() ? "" : " version '" + version + "'")),
        name};
  }
  if (model->rollout.state == RolloutState::kRolling) {
    return {Unavailable("model '" + name + "' is being rolled out (rollout " +
                        std::to_string(model->rollout.id) + "); scale it once that is over"),
            name};
  }
  std::vector<size_t> live;
  for (size_t i : model->slots) {
    if (!workers_[i]->retiring()) live.push_back(i);
  }
  int before = static_cast<int>(live.size());
  size_t model_index = static_cast<size_t>(model - models_.data());
  // New workers take the config's instance entries in order (the n-th worker the n-th entry);
  // beyond them, the last entry.
  const std::vector<InstanceConfig> instances = ExpandInstances(model->config, AvailableCores());
  for (int n = before; n < count; ++n) {
    const size_t k = static_cast<size_t>(n);
    AddSlot(model_index, instances.empty() ? InstanceConfig{}
                                           : instances[std::min(k, instances.size() - 1)]);
    workers_.Launch(*workers_.back());
  }
  // Remove the youngest workers first: the older ones are warm.
  for (int n = before; n > count; --n) RetireSlot(*workers_[live[static_cast<size_t>(n - 1)]], "scaled down");
  TF_LOG(kInfo) << "scaled" << Kv("model", name) << Kv("from", before) << Kv("to", count);
  return {Status::Ok(), name, before, count};
}

void Supervisor::AddModel(const ModelConfig& config, FileIdentity file) {
  models_.push_back(Model{config, ModelQueue(BatchingPolicyFor(config)), ModelStats(clock_.Now()), {}, false, BatchCostModel()});
  models_.back().file = std::move(file);
  size_t index = models_.size() - 1;
  for (const auto& instance : ExpandInstances(config, AvailableCores())) AddSlot(index, instance);
  AddSpares(index);
}

json Supervisor::Reload() {
  FarmConfig fresh;
  Status s = LoadConfigFile(config_.source_path, &fresh);
  if (!s.ok()) {
    TF_LOG(kError) << "reload refused; keeping the running config" << Kv("error", s.message());
    return AdminError("reload refused, the running config stays: " + s.message());
  }
  notifier_.Reloading();
  // A reload reads each model file of the fresh config once, whole, to hash it (file_identity.h).
  ModelFiles files;
  for (const ModelConfig& m : fresh.models) files.fresh[ModelFiles::Key(m)] = ReadFileIdentity(m.path);
  for (size_t i : served_index_) files.served[ModelFiles::Key(models_[i].config)] = models_[i].file;
  const ReloadPlan plan = PlanReload(config_, served_configs_, fresh, AvailableCores(), files);
  std::vector<std::string> notes;
  if (!plan.needs_restart.empty()) {
    std::string keys;
    for (const auto& key : plan.needs_restart) keys += (keys.empty() ? "" : ", ") + key;
    notes.push_back(keys + " changed: a restart applies " +
                    (plan.needs_restart.size() == 1 ? "it" : "them"));
  }
  for (const ModelConfig& m : plan.added) {
    size_t first_new = workers_.size();
    AddModel(m, files.fresh[ModelFiles::Key(m)]);
    for (size_t i = first_new; i < workers_.size(); ++i) workers_.Launch(*workers_[i]);
    notes.push_back("added " + m.name + " version " + m.version);
  }
  json rollouts = json::array();
  const uint64_t first_rollout = next_rollout_id_;
  for (const ModelUpdate& update : plan.updated) {
    notes.push_back(ApplyModelUpdate(update, files.fresh[ModelFiles::Key(update.config)]));
    const Model* model = FindModel(update.config.name, update.config.version);
    if (model->rollout.id >= first_rollout) rollouts.push_back(RolloutJson(*model));
  }
  for (const ModelConfig& gone : plan.removed) {
    Model* model = FindModel(gone.name, gone.version);
    // A version whose model keeps another: it serves until one of those is loaded.
    if (std::any_of(fresh.models.begin(), fresh.models.end(),
                    [&](const ModelConfig& m) { return m.name == gone.name; })) {
      model->retire_when_replaced = true;
      notes.push_back("removing " + gone.name + " version " + gone.version +
                      " once another version is ready");
      continue;
    }
    model->removed = true;
    notes.push_back("removing " + gone.name + " once its " +
                    std::to_string(model->queue.size()) + " queued request(s) are served");
  }
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
  config_.limits.max_queued_per_client = fresh.limits.max_queued_per_client;
  quota_.set_max_per_client(fresh.limits.max_queued_per_client);
  replies_.set_unread_limits(fresh.limits.max_unread_replies_per_client,
                             fresh.limits.max_unread_reply_bytes_per_client);
  config_.max_connections = fresh.max_connections;
  config_.limits.max_shm_bytes = fresh.limits.max_shm_bytes;
  ApplyResourceLimits();
  RebuildServedModels();
  std::string summary;
  for (const auto& n : notes) summary += (summary.empty() ? "" : "; ") + n;
  TF_LOG(kInfo) << "config reloaded" << Kv("changes", summary);
  json reply = AdminOk("reloaded: " + summary);
  reply["rollouts"] = std::move(rollouts);  // the rolling replacements this reload started
  return reply;
}

std::string Supervisor::ApplyModelUpdate(const ModelUpdate& update, const FileIdentity& file) {
  const ModelConfig& m = update.config;
  Model* existing = FindModel(m.name, m.version);
  existing->retire_when_replaced = false;  // listed again by this config
  if (existing->rollout.state == RolloutState::kRolling) {
    // Its workers run two configs already; a third would make rollback ambiguous.
    return m.name + ": unchanged, rollout " + std::to_string(existing->rollout.id) +
           " is still in progress (" + std::to_string(existing->rollout.replaced()) + "/" +
           std::to_string(existing->rollout.total) + "); reload again once it is over";
  }
  const ModelConfig previous_config = existing->config;
  const FileIdentity previous_file = existing->file;
  const int ready_before = ReadyWorkers(*existing);
  existing->config = m;
  existing->file = file;
  existing->queue.SetPolicy(BatchingPolicyFor(m));
  // New workers run another file, format or pipeline: its cost is learnt afresh (the stall cap
  // would otherwise take ~15-30 batches to believe a much slower model).
  if (update.replace_workers) existing->cost = BatchCostModel();
  ReconcileSparesAfterReload(*existing, previous_config, update);
  if (update.replace_at_once) return ReplaceAllAtOnce(*existing, update);
  const std::vector<InstanceConfig>& wanted = update.instances;
  const int wanted_count = static_cast<int>(wanted.size());
  std::string scaled;
  // Fewer workers: the youngest go first, before the rest is rolled.
  if (wanted_count < LiveWorkers(*existing)) {
    scaled = Scale(m.name, wanted_count, m.version).Describe();
  }
  existing = FindModel(m.name, m.version);
  std::vector<size_t> outdated;
  std::vector<InstanceConfig> replacements;
  size_t k = 0;
  for (size_t i : existing->slots) {
    WorkerSlot& slot = *workers_[i];
    if (slot.retiring()) continue;
    const InstanceConfig& instance =
        wanted.empty() ? slot.instance() : wanted[std::min(k++, wanted.size() - 1)];
    if (!WorkerNeedsReplacing(update, slot.instance(), instance)) {
      slot.UpdateConfig(m, instance);
      continue;
    }
    // Keeps its old config until it is retired: a crash relaunches the old model.
    outdated.push_back(i);
    replacements.push_back(instance);
  }
  if (wanted_count > LiveWorkers(*existing)) {
    scaled = Scale(m.name, wanted_count, m.version).Describe();
  }
  existing = FindModel(m.name, m.version);
  std::string rolled;
  if (!outdated.empty()) {
    StartRollout(*existing, std::move(outdated), std::move(replacements), previous_config,
                 previous_file, ready_before);
    const ModelRollout& r = existing->rollout;
    rolled = " (rollout " + std::to_string(r.id) + ": " + std::to_string(r.total) +
             " worker(s) to replace, surge " + std::to_string(m.rollout.max_surge) +
             ", unavailable " + std::to_string(m.rollout.max_unavailable) +
             (update.file_changed ? ", model file changed" : "") + ")";
  }
  return m.name + rolled + (scaled.empty() ? "" : ": " + scaled);
}

std::string Supervisor::ReplaceAllAtOnce(Model& model, const ModelUpdate& update) {
  const ModelConfig& m = update.config;
  const std::vector<InstanceConfig>& wanted = update.instances;
  size_t k = 0, replaced = 0;
  for (size_t i : model.slots) {
    WorkerSlot& slot = *workers_[i];
    if (slot.retiring()) continue;
    const InstanceConfig& instance =
        wanted.empty() ? slot.instance() : wanted[std::min(k++, wanted.size() - 1)];
    slot.UpdateConfig(m, instance);
    // A slot without a process (backing off, failed) launches the new config anyway.
    if (slot.state() != SlotState::kReady && slot.state() != SlotState::kStarting) continue;
    slot.BeginGracefulRestart("config reloaded: ring geometry or inputs changed");
    ++replaced;
  }
  const ScaleResult scaled = Scale(m.name, static_cast<int>(wanted.size()), m.version);
  return m.name +
         (replaced > 0 ? " (" + std::to_string(replaced) +
                             " worker(s) replaced at once (ring or inputs changed))"
                       : "") +
         ": " + scaled.Describe();
}

int Supervisor::ReadyWorkers(const Model& model) const {
  int ready = 0;
  for (size_t i : model.slots) ready += workers_[i]->state() == SlotState::kReady;
  return ready;
}

int Supervisor::LiveWorkers(const Model& model) const {
  int live = 0;
  for (size_t i : model.slots) live += !workers_[i]->retiring();
  return live;
}

void Supervisor::RetireIdleSlots() {
  for (auto& slot : workers_) {
    if (slot->TakeStopRequest(clock_.Now())) SendStop(*slot);
  }
  for (size_t m = 0; m < models_.size(); ++m) {
    Model& model = models_[m];
    if (!IsStoppingWorkers(farm_.phase)) Guarded("rollout", [&] { AdvanceRollout(model); });
    if (model.removed && model.queue.empty()) {
      for (size_t i : model.slots) {
        if (!workers_[i]->retiring()) RetireSlot(*workers_[i], "model unloaded or removed by reload");
      }
    }
    if (model.removed) RetireSpares(model, "model unloaded or removed by reload");
    auto gone = [&](size_t i) {
      return workers_[i]->retiring() && workers_[i]->state() == SlotState::kStopped;
    };
    model.slots.erase(std::remove_if(model.slots.begin(), model.slots.end(), gone), model.slots.end());
    model.spares.erase(std::remove_if(model.spares.begin(), model.spares.end(), gone),
                       model.spares.end());
  }
}

void Supervisor::HandleWorkerOutput(WorkerSlot& slot) {
  slot.ReadOutput([&](const std::string& line) {
    if (line.rfind("ts=", 0) == 0) {
      // Already a logfmt line with the worker's id, pid and model: pass it through whole.
      std::string out = line + "\n";
      ssize_t ignored = ::write(STDERR_FILENO, out.data(), out.size());
      (void)ignored;
    } else if (!line.empty()) {
      TF_LOG(kInfo) << line << Kv("worker", slot.id()) << Kv("worker_pid", slot.pid())
                    << Kv("model", slot.model_name()) << Kv("stream", "output");
    }
  });
}

void Supervisor::Housekeeping() {
  TimePoint now = clock_.Now();
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
  if (resource_metrics_) resource_metrics_->Export(Resources());
  WatchFiles(now);
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
        metrics_->GpuFallback(slot.id(), slot.model_name(), slot.model_version(), slot.fallen_back());
        if (auto sample = SampleProcess(slot.pid(), now)) {
          metrics_->WorkerRss(slot.id(), slot.model_name(), slot.model_version(), sample->rss_bytes);
        }
        const DeviceTelemetry& t = slot.telemetry;
        metrics_->WorkerStageSeconds(slot.id(), slot.model_name(), slot.model_version(), t.h2d_us * 1e-6,
                                     t.compute_us * 1e-6, t.d2h_us * 1e-6);
        if (t.memory_allocated >= 0) {
          metrics_->WorkerGpuMemory(slot.id(), slot.model_name(), slot.model_version(), t.memory_allocated,
                                    t.memory_reserved);
        }
      }
    }
    if (metrics_) {
      metrics_->QueueDepth(model.config.name, model.config.version, model.queue.size());
      for (const char* state : {"starting", "ready", "draining", "stopping", "restarting", "failed", "stopped"}) {
        metrics_->Workers(model.config.name, model.config.version, state, states[state]);
      }
      metrics_->Workers(model.config.name, model.config.version, "spare", ReadySpares(model));
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

}  // namespace torchfarm
