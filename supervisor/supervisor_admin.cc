// Supervisor, the admin socket: JSON commands from `torchfarm stats|top|ctl` and probes
// (docs/operations.md). One JSON frame in, one JSON frame out; REQ and DEALER clients both work.
//   {"cmd":"health"}  {"cmd":"stats"}  {"cmd":"drain"}  {"cmd":"reload"}
//   {"cmd":"restart","worker":N}  {"cmd":"scale","model":"mlp","count":N}
//   {"cmd":"models"}  {"cmd":"load","model":"mlp"[,"config":{...}]}  {"cmd":"unload","model":"mlp"}
#include <unistd.h>

#include "supervisor/frontend/frontend.h"
#include "common/log.h"
#include "common/worker_count.h"
#include "common/protocol.h"
#include "supervisor/supervisor.h"
#include "supervisor/zmq_util.h"

namespace torchfarm {

using nlohmann::json;

namespace {
constexpr const char* kVersion = "0.1.0";

}  // namespace

void Supervisor::RegisterAdminCommands() {
  using Field = AdminService::Field;
  admin_service_.Register("health", {}, [this](const json&) { return HealthJson(); });
  admin_service_.Register("stats", {}, [this](const json&) { return StatsJson(); });
  admin_service_.Register("drain", {}, [this](const json&) { return Drain(); });
  admin_service_.Register("reload", {}, [this](const json&) { return Reload(); });
  admin_service_.Register("restart", {Field{"worker", false}}, [this](const json& request) {
    return RestartWorker(request["worker"].get<int>());
  });
  admin_service_.Register(
      "scale", {Field{"model", true}, Field{"count", false, 0, kMaxWorkersPerModel}},
      [this](const json& request) {
        const ScaleResult scaled =
            Scale(request["model"].get<std::string>(), request["count"].get<int>());
        return scaled.ok() ? AdminOk(scaled.Describe()) : AdminError(scaled.Describe());
      });
  admin_service_.Register("models", {}, [this](const json&) { return ModelsJson(); });
  admin_service_.Register("load", {Field{"model", true}},
                          [this](const json& request) { return Load(request); });
  admin_service_.Register("unload", {Field{"model", true}}, [this](const json& request) {
    return Unload(request["model"].get<std::string>());
  });
}

json Supervisor::HealthJson() const {
  json models = json::array();
  bool all_ready = true;
  for (const auto& model : models_) {
    if (model.removed) continue;
    int ready = 0;
    for (size_t i : model.slots) ready += workers_[i]->state() == SlotState::kReady;
    all_ready = all_ready && ready > 0;
    models.push_back({{"name", model.config.name},
                      {"version", model.config.version},
                      {"ready_workers", ready},
                      {"workers", model.slots.size()},
                      {"spares_ready", ReadySpares(model)},
                      {"ready", ready > 0}});
  }
  return {{"live", true},
          {"ready", all_ready && !IsDraining(farm_.phase)},
          {"draining", IsDraining(farm_.phase)},
          {"models", models}};
}

// The worker's own account of its device; stage times as means per batch of its current process.
static json DeviceStatsJson(const DeviceTelemetry& t) {
  auto mean = [&](uint64_t sum) { return t.batches ? static_cast<double>(sum) / t.batches : 0.0; };
  json j = {{"name", t.name},
            {"precision", t.precision},
            {"streams", t.streams},
            {"pinned", t.pinned},
            {"mps_attached", t.mps_attached},
            {"warmup_ms", t.warmup_ms},
            {"mean_h2d_us", mean(t.h2d_us)},
            {"mean_compute_us", mean(t.compute_us)},
            {"mean_d2h_us", mean(t.d2h_us)}};
  if (t.memory_allocated >= 0) {
    j["memory_allocated"] = t.memory_allocated;
    j["memory_reserved"] = t.memory_reserved;
  }
  return j;
}

// Where the current process's start-up went (null for a phase not reached yet).
static json StartTimesJson(const StartTimes& t) {
  auto ms = [](double v) { return v >= 0 ? json(v) : json(nullptr); };
  return {{"via", t.via},
          {"launch_to_hello_ms", ms(t.launch_to_hello_ms)},
          {"hello_to_ready_ms", ms(t.hello_to_ready_ms)},
          {"load_ms", ms(t.load_ms)},
          {"warmup_ms", ms(t.warmup_ms)},
          {"launch_to_ready_ms", ms(t.launch_to_ready_ms)}};
}

json Supervisor::WorkerJson(WorkerSlot& slot, TimePoint now) {
  std::string state = SlotStateName(slot.state());
  if (slot.state() == SlotState::kReady && slot.inflight() > 0) state = "busy";
  json rss = nullptr, rss_anon = nullptr, rss_shmem = nullptr, cpu = nullptr;
  if (auto sample = SampleProcess(slot.pid(), now)) {
    rss = sample->rss_bytes;
    rss_anon = sample->rss_anon_bytes;
    rss_shmem = sample->rss_shmem_bytes;
    auto previous = process_samples_.find(slot.pid());
    if (previous != process_samples_.end() && now - previous->second.taken > Millis(100)) {
      cpu = CpuPercent(previous->second, *sample);
    }
    if (previous == process_samples_.end() || now - previous->second.taken > Millis(900)) {
      process_samples_[slot.pid()] = *sample;
    }
  }
  double uptime = slot.state() == SlotState::kReady ? ToMicros(now - slot.ready_since()) / 1e6 : 0.0;
  return {
      {"id", slot.id()},
      {"model", slot.model_name()},
      {"version", slot.model_version()},
      {"pid", slot.pid()},
      {"device", slot.device()},
      {"fallback", slot.fallen_back()},
      {"fallback_reason", slot.fallback_reason()},
      {"state", state},
      {"role", slot.spare() ? "spare" : "serving"},
      {"promotions", slot.promotions()},
      {"last_promotion_us", slot.last_promotion_us() >= 0 ? json(slot.last_promotion_us())
                                                          : json(nullptr)},
      {"generation", slot.generation()},
      {"start", StartTimesJson(slot.start_times())},
      {"uptime_s", uptime},
      {"restarts", slot.restarts()},
      {"restart_in_ms", slot.RestartDue(TimePoint::max())
                            ? json(std::max<int64_t>(0, ToMicros(slot.restart_at() - now) / 1000))
                            : json(nullptr)},
      {"last_exit", slot.last_exit()},
      {"failure_reason", slot.failure_reason()},
      {"requests", slot.requests_done},
      {"batches", slot.batches_done},
      {"mean_batch_size",
       slot.batches_done ? static_cast<double>(slot.rows_done) / slot.batches_done : 0.0},
      {"inflight", slot.inflight()},
      {"rss_bytes", rss},
      {"rss_anon_bytes", rss_anon},
      {"rss_shmem_bytes", rss_shmem},
      {"cpu_percent", cpu},
      {"gpu_mem_bytes", slot.telemetry.memory_allocated >= 0 ? json(slot.telemetry.memory_allocated)
                                                             : json(nullptr)},
      {"device_stats", DeviceStatsJson(slot.telemetry)}};
}

json Supervisor::StatsJson() {
  TimePoint now = clock_.Now();
  json models = json::array();
  for (const auto& model : models_) {
    if (model.removed && model.slots.empty()) continue;
    json m = model.stats.ToJson(now);
    m["name"] = model.config.name;
    m["version"] = model.config.version;
    m["state"] = model.removed ? "removing" : ModelAvailable(model) ? "available" : "unavailable";
    m["queue_depth"] = model.queue.size();
    m["workers"] = model.slots.size();
    m["spares"] = model.spares.size();
    m["spares_ready"] = ReadySpares(model);
    m["spare_promotions"] = model.spare_promotions;
    if (model.rollout.state != RolloutState::kNone) m["rollout"] = RolloutJson(model);
    models.push_back(std::move(m));
  }
  json workers = json::array();
  for (auto& slot : workers_) {
    if (slot->retiring() && slot->state() == SlotState::kStopped) continue;
    workers.push_back(WorkerJson(*slot, now));
  }
  json zygote = zygotes_.ToJson(now);
  for (auto& place : zygote["zygotes"]) {
    // A standby forked from the primary shares most of these pages with it (copy-on-write).
    auto sample = SampleProcess(place["pid"].get<pid_t>(), now);
    place["rss_bytes"] = sample ? json(sample->rss_bytes) : json(nullptr);
  }
  json supervisor = {{"pid", ::getpid()},
                     {"uptime_s", ToMicros(now - started_) / 1e6},
                     {"version", kVersion},
                     {"config", config_.source_path},
                     {"draining", IsDraining(farm_.phase)},
                     {"worker_launch", config_.worker_launch},
                     {"zygote", std::move(zygote)}};
  if (auto self = SampleProcess(::getpid(), now)) {
    // RSS counts the worker segments' pages this process touched; the private part is RssAnon.
    supervisor["rss_bytes"] = self->rss_bytes;
    supervisor["rss_anon_bytes"] = self->rss_anon_bytes;
    supervisor["rss_shmem_bytes"] = self->rss_shmem_bytes;
  }
  // Clients that stop reading (reply_writer.h): what they cost and what could not be delivered.
  const ReplyBacklog::Counts unread = replies_.backlog().Total();
  supervisor["replies"] = {{"clients_unread", replies_.backlog().clients()},
                           {"unread", unread.replies},
                           {"unread_bytes", unread.bytes},
                           {"undeliverable_gone", replies_.undeliverable().gone},
                           {"undeliverable_full", replies_.undeliverable().full},
                           {"detached_pins", detached_replies_}};
  json gpu = {{"mps", config_.gpu.mps}, {"mps_state", mps_.state()}};
  json client_shm = {{"enabled", config_.client_shm.enabled}};
  if (client_shm_) {
    client_shm["regions"] = client_shm_->regions();
    client_shm["bytes"] = client_shm_->bytes();
    client_shm["created"] = client_shm_->created();
    client_shm["expired"] = client_shm_->expired();
    client_shm["in_place_batches"] = dispatcher_.in_place_batches();
  }
  json out = {{"supervisor", supervisor}, {"gpu", gpu},           {"client_shm", client_shm},
              {"models", models},         {"workers", workers},   {"resources", ResourcesJson()}};
  if (frontend_) out["frontend"] = frontend_->ToJson();
  return out;
}

}  // namespace torchfarm
