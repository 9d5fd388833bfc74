#include "supervisor/admin/farm_status.h"

#include <chrono>

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "common/log.h"
#include "supervisor/admin/admin_service.h"
#include "supervisor/dispatch/model_metadata.h"
#include "supervisor/models/model_lifecycle.h"

namespace torchfarm {

using nlohmann::json;

namespace {

constexpr const char* kVersion = "0.1.0";

// The worker's own account of its device; stage times as means per batch of its current process.
json DeviceStatsJson(const DeviceTelemetry& t) {
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
json StartTimesJson(const StartTimes& t) {
  auto ms = [](double v) { return v >= 0 ? json(v) : json(nullptr); };
  return {{"via", t.via},
          {"launch_to_hello_ms", ms(t.launch_to_hello_ms)},
          {"hello_to_ready_ms", ms(t.hello_to_ready_ms)},
          {"load_ms", ms(t.load_ms)},
          {"warmup_ms", ms(t.warmup_ms)},
          {"launch_to_ready_ms", ms(t.launch_to_ready_ms)}};
}

// A load over the admin socket whose every worker failed before one was ready
// (ModelControl::DropFailedLoads unregisters it at the end of the loop turn; readers in between
// see it the same way).
bool LoadFailed(const ModelTable& table, const ServedModel& model) {
  return model.load_pending && !model.removed && !model.slots.empty() && !table.Available(model);
}

json FailedLoadJson(const ModelTable::FailedLoad& failed) {
  return {
      {"name", failed.name},
      {"version", failed.version},
      {"path", failed.path},
      {"state", "failed"},
      {"ready_workers", 0},
      {"workers", 0},
      {"queue_depth", 0},
      {"reason", "the load failed, the model is not registered: " +
                     (failed.reason.empty() ? std::string("no worker started") : failed.reason)}};
}

bool HasFailedLoad(const ModelTable& table, const ModelConfig& config) {
  return std::any_of(table.failed_loads().begin(), table.failed_loads().end(),
                     [&](const ModelTable::FailedLoad& f) {
                       return f.name == config.name && f.version == config.version;
                     });
}

}  // namespace

json FarmStatus::Health() const {
  json models = json::array();
  bool all_ready = true;
  for (const auto& model : s_.models) {
    if (model.removed || LoadFailed(s_.models, model)) continue;  // not meant to serve
    const ModelWorkerTally tally = s_.models.Tally(model);
    const int ready = tally.ready;
    all_ready = all_ready && ready > 0;
    models.push_back({{"name", model.config.name},
                      {"version", model.config.version},
                      {"ready_workers", ready},
                      {"workers", model.slots.size()},
                      {"spares_ready", tally.spares_ready},
                      {"ready", ready > 0}});
  }
  return {{"live", true},
          {"ready", all_ready && !IsDraining(s_.farm.phase)},
          {"draining", IsDraining(s_.farm.phase)},
          {"models", models}};
}

json FarmStatus::Worker(const WorkerSlot& slot, TimePoint now) {
  std::string state = SlotStateName(slot.state());
  if (slot.state() == SlotState::kReady && slot.inflight() > 0) state = "busy";
  json rss = nullptr, rss_anon = nullptr, rss_shmem = nullptr, cpu = nullptr;
  if (auto sample = SampleProcess(slot.pid(), now)) {
    rss = sample->rss_bytes;
    rss_anon = sample->rss_anon_bytes;
    rss_shmem = sample->rss_shmem_bytes;
    auto previous = samples_.find(slot.pid());
    if (previous != samples_.end() && now - previous->second.taken > Millis(100)) {
      cpu = CpuPercent(previous->second, *sample);
    }
    if (previous == samples_.end() || now - previous->second.taken > Millis(900)) {
      samples_[slot.pid()] = *sample;
    }
  }
  double uptime =
      slot.state() == SlotState::kReady ? ToMicros(now - slot.ready_since()) / 1e6 : 0.0;
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
      {"last_promotion_us",
       slot.last_promotion_us() >= 0 ? json(slot.last_promotion_us()) : json(nullptr)},
      {"generation", slot.generation()},
      {"start", StartTimesJson(slot.start_times())},
      {"uptime_s", uptime},
      {"restarts", slot.restarts()},
      {"protocol_violations", slot.protocol_violations()},
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

json FarmStatus::Stats() {
  TimePoint now = s_.clock.Now();
  json models = json::array();
  for (const auto& model : s_.models) {
    if (model.removed && model.slots.empty()) continue;
    json m = model.stats.ToJson(now);
    m["name"] = model.config.name;
    m["version"] = model.config.version;
    m["state"] = model.removed                ? "removing"
                 : s_.models.Available(model) ? "available"
                                              : "unavailable";
    m["queue_depth"] = model.queue.size();
    if (model.config.latency_slo_ms > 0) m["slo"]["latency_slo_ms"] = model.config.latency_slo_ms;
    m["workers"] = model.slots.size();
    m["spares"] = model.spares.size();
    m["spares_ready"] = s_.models.Tally(model).spares_ready;
    m["spare_promotions"] = model.spare_promotions;
    if (model.rollout.state != RolloutState::kNone)
      m["rollout"] = RolloutJson(model.config.name, model.rollout);
    models.push_back(std::move(m));
  }
  json workers = json::array();
  for (const auto& slot : s_.workers) {
    if (slot->retiring() && slot->state() == SlotState::kStopped) continue;
    workers.push_back(Worker(*slot, now));
  }
  ForgetGoneSamples();
  json zygote = s_.zygotes.ToJson(now);
  for (auto& place : zygote["zygotes"]) {
    // A standby forked from the primary shares most of these pages with it (copy-on-write).
    auto sample = SampleProcess(place["pid"].get<pid_t>(), now);
    place["rss_bytes"] = sample ? json(sample->rss_bytes) : json(nullptr);
  }
  json supervisor = {{"pid", ::getpid()},
                     {"uptime_s", ToMicros(now - started_) / 1e6},
                     {"version", kVersion},
                     {"config", s_.config.source_path},
                     {"draining", IsDraining(s_.farm.phase)},
                     {"worker_launch", s_.config.worker_launch},
                     {"worker_protocol_violations", s_.workers.protocol_violations()},
                     {"zygote", std::move(zygote)}};
  if (auto self = SampleProcess(::getpid(), now)) {
    // RSS counts the worker segments' pages this process touched; the private part is RssAnon.
    supervisor["rss_bytes"] = self->rss_bytes;
    supervisor["rss_anon_bytes"] = self->rss_anon_bytes;
    supervisor["rss_shmem_bytes"] = self->rss_shmem_bytes;
  }
  // Clients that stop reading (reply_writer.h): what they cost and what could not be delivered.
  const ReplyBacklog::Counts unread = s_.replies.backlog().Total();
  supervisor["replies"] = {{"clients_unread", s_.replies.backlog().clients()},
                           {"unread", unread.replies},
                           {"unread_bytes", unread.bytes},
                           {"undeliverable_gone", s_.replies.undeliverable().gone},
                           {"undeliverable_full", s_.replies.undeliverable().full},
                           {"detached_pins", s_.responses.detached_replies()}};
  json gpu = {{"mps", s_.config.gpu.mps}, {"mps_state", s_.mps.state()}};
  json client_shm = {{"enabled", s_.config.client_shm.enabled}};
  if (client_shm_) {
    client_shm["regions"] = client_shm_->regions();
    client_shm["bytes"] = client_shm_->bytes();
    client_shm["created"] = client_shm_->created();
    client_shm["expired"] = client_shm_->expired();
    client_shm["in_place_batches"] = s_.dispatcher.in_place_batches();
  }
  json out = {{"supervisor", supervisor}, {"gpu", gpu},         {"client_shm", client_shm},
              {"models", models},         {"workers", workers}, {"resources", Resources()}};
  return out;
}

void FarmStatus::ForgetGoneSamples() {
  // The CPU samples of processes that are gone: a few bytes each, but one per worker ever run.
  for (auto it = samples_.begin(); it != samples_.end();) {
    const bool live = std::any_of(s_.workers.begin(), s_.workers.end(),
                                  [&](const auto& slot) { return slot->pid() == it->first; });
    it = live ? std::next(it) : samples_.erase(it);
  }
}

json FarmStatus::Models() const {
  json models = json::array();
  for (const auto& model : s_.models) {
    if (model.removed && (model.slots.empty() || HasFailedLoad(s_.models, model.config))) continue;
    if (LoadFailed(s_.models, model)) {
      const ModelConfig& c = model.config;
      models.push_back(
          FailedLoadJson({c.name, c.version, c.path, s_.models.Tally(model).failure_reason}));
      continue;
    }
    const ModelWorkerTally tally = s_.models.Tally(model);
    ModelWorkerCounts counts;
    counts.ready = tally.ready;
    counts.starting = tally.starting;
    const std::string& reason = tally.failure_reason;
    const ModelLifecycle state =
        LifecycleOf(model.removed, model.rollout.state == RolloutState::kRolling, counts);
    json m = {{"name", model.config.name},         {"version", model.config.version},
              {"path", model.config.path},         {"state", ModelLifecycleName(state)},
              {"ready_workers", counts.ready},     {"workers", model.slots.size()},
              {"queue_depth", model.queue.size()}, {"reason", reason}};
    if (model.rollout.state != RolloutState::kNone)
      m["rollout"] = RolloutJson(model.config.name, model.rollout);
    models.push_back(std::move(m));
  }
  // Loads that failed: no longer models (readiness does not wait for them), reported until the
  // name is loaded again.
  for (const ModelTable::FailedLoad& failed : s_.models.failed_loads()) {
    models.push_back(FailedLoadJson(failed));
  }
  return {{"ok", true}, {"config", s_.config.source_path}, {"models", models}};
}

// One entry per served (name, version): its health, its metadata ("versions" lists every loaded
// version of the name) and "default": true on the version a request without one gets.
json FarmStatus::FrontendMeta(bool statistics) const {
  json health = Health();
  json& models = health["models"];
  for (const auto& model : s_.models) {
    if (model.removed) continue;
    const ModelConfig& config = model.config;
    auto it = std::find_if(models.begin(), models.end(), [&](const json& m) {
      return m.value("name", "") == config.name && m.value("version", "") == config.version;
    });
    if (it == models.end()) continue;
    const bool ready = it->value("ready", false) && !IsDraining(s_.farm.phase);
    it->update(ModelMetadataJson(model, ready, s_.models.ServedVersions(config.name)));
    (*it)["default"] = s_.models.DefaultVersion(config.name) == config.version;
    if (statistics) (*it)["statistics"] = StatisticsJson(model.stats.totals(), s_.clock.Now());
  }
  return health;
}

// {"requests", "errors", "batches", "rows", "queue_us", "compute_us", "total_us",
//  "last_inference_ms" (wall clock, ms since the epoch; 0: none yet)}: what the v2 statistics
// extension (frontend/triton_model_stats.h) is made of.
json StatisticsJson(const ModelStats::Totals& totals, TimePoint now) {
  int64_t last_ms = 0;
  if (totals.last_completion != TimePoint{}) {
    const int64_t wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    last_ms =
        wall_ms -
        std::chrono::duration_cast<std::chrono::milliseconds>(now - totals.last_completion).count();
  }
  return {{"requests", totals.requests}, {"errors", totals.errors},
          {"batches", totals.batches},   {"rows", totals.rows},
          {"queue_us", totals.queue_us}, {"compute_us", totals.compute_us},
          {"total_us", totals.total_us}, {"last_inference_ms", last_ms}};
}

std::string RedactPaths(const std::string& text) {
  auto ends_path = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\'' || c == '"' || c == '(' || c == ')' ||
           c == '[' || c == ']' || c == ',' || c == ';';
  };
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const bool starts = text[i] == '/' && (i == 0 || ends_path(text[i - 1]) || text[i - 1] == '=' ||
                                           text[i - 1] == ':');
    if (!starts) {
      out += text[i++];
      continue;
    }
    size_t end = i;
    while (end < text.size() && !ends_path(text[end])) ++end;
    std::string path = text.substr(i, end - i);
    // A trailing full stop or colon ends the sentence, not the path.
    std::string tail;
    while (!path.empty() && (path.back() == '.' || path.back() == ':')) {
      tail.insert(tail.begin(), path.back());
      path.pop_back();
    }
    const size_t last = path.find_last_of('/');
    const size_t first_real = path.find_first_not_of('/');
    if (first_real != std::string::npos && last > first_real) {
      out += ".../" + path.substr(last + 1) + tail;  // two or more components: a path
    } else {
      out += path + tail;  // "/" or "/name": nothing to hide
    }
    i = end;
  }
  return out;
}

json FarmStatus::Dashboard(uint64_t events_after) {
  const TimePoint now = s_.clock.Now();
  if (dashboard_.is_null() || now - dashboard_at_ >= kDashboardReuse || now < dashboard_at_) {
    dashboard_ = DashboardBody(now);
    dashboard_at_ = now;
  }
  json out = dashboard_;
  out["events"] = events_ ? events_->ToJson(kDashboardEvents, events_after) : json::array();
  out["last_event"] = events_ ? events_->last_seq() : 0;
  return out;
}

json FarmStatus::DashboardBody(TimePoint now) {
  json models = json::array();
  uint64_t requests = 0, errors = 0;
  double rps = 0;
  size_t queued = 0;
  for (const auto& model : s_.models) {
    if (model.removed && model.slots.empty()) continue;
    if (LoadFailed(s_.models, model)) continue;
    const ModelWorkerTally tally = s_.models.Tally(model);
    ModelWorkerCounts counts;
    counts.ready = tally.ready;
    counts.starting = tally.starting;
    const ModelLifecycle state =
        LifecycleOf(model.removed, model.rollout.state == RolloutState::kRolling, counts);
    json m = model.stats.ToJson(now);
    m["name"] = model.config.name;
    m["version"] = model.config.version;
    m["versions"] = s_.models.ServedVersions(model.config.name);
    m["state"] = ModelLifecycleName(state);
    m["ready_workers"] = tally.ready;
    m["workers"] = model.slots.size();
    m["spares"] = model.spares.size();
    m["spares_ready"] = tally.spares_ready;
    m["spare_promotions"] = model.spare_promotions;
    m["queue_depth"] = model.queue.size();
    m["reason"] = RedactPaths(tally.failure_reason);
    if (model.config.latency_slo_ms > 0) m["slo"]["latency_slo_ms"] = model.config.latency_slo_ms;
    if (model.rollout.state != RolloutState::kNone) {
      json rollout = RolloutJson(model.config.name, model.rollout);
      rollout["reason"] = RedactPaths(rollout.value("reason", ""));
      m["rollout"] = std::move(rollout);
    }
    requests += model.stats.requests();
    errors += model.stats.errors() + model.stats.rejected();
    rps += m.value("throughput_rps_1s", 0.0);
    queued += model.queue.size();
    models.push_back(std::move(m));
  }
  json workers = json::array();
  int ready = 0, serving = 0, restarts = 0;
  for (const auto& slot : s_.workers) {
    if (slot->retiring() && slot->state() == SlotState::kStopped) continue;
    json full = Worker(*slot, now);
    json w;
    for (const char* key :
         {"id", "model", "version", "pid", "device", "fallback", "state", "role", "promotions",
          "uptime_s", "restarts", "restart_in_ms", "requests", "batches", "mean_batch_size",
          "inflight", "rss_bytes", "cpu_percent", "gpu_mem_bytes"}) {
      w[key] = std::move(full[key]);
    }
    w["last_exit"] = RedactPaths(slot->last_exit());
    w["failure_reason"] = RedactPaths(slot->failure_reason());
    if (!slot->spare() && !slot->retiring()) {
      ++serving;
      ready += slot->state() == SlotState::kReady;
    }
    restarts += slot->restarts();
    workers.push_back(std::move(w));
  }
  ForgetGoneSamples();
  json supervisor = {{"pid", ::getpid()},
                     {"uptime_s", ToMicros(now - started_) / 1e6},
                     {"version", kVersion},
                     {"draining", IsDraining(s_.farm.phase)},
                     {"ready", Health().value("ready", false)}};
  if (auto self = SampleProcess(::getpid(), now)) {
    supervisor["rss_bytes"] = self->rss_bytes;
    if (self_sample_ && now - self_sample_->taken > Millis(100)) {
      supervisor["cpu_percent"] = CpuPercent(*self_sample_, *self);
    }
    if (!self_sample_ || now - self_sample_->taken > Millis(900)) self_sample_ = *self;
  }
  const ResourceReport r = s_.limits.Report();
  const int64_t wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  return {{"time_ms", wall_ms},
          {"supervisor", std::move(supervisor)},
          {"totals",
           {{"requests", requests},
            {"errors", errors},
            {"throughput_rps_1s", rps},
            {"queue_depth", queued},
            {"workers", serving},
            {"ready_workers", ready},
            {"restarts", restarts}}},
          {"models", std::move(models)},
          {"workers", std::move(workers)},
          {"resources",
           {{"job_connections", r.job_connections},
            {"max_connections", r.max_connections},
            {"refused_connections", r.refused_max_connections},
            {"refused_descriptor_reserve", r.refused_descriptor_reserve}}}};
}

json FarmStatus::Resources() const {
  const ResourceReport r = s_.limits.Report();
  json errors = json::object();
  for (const auto& [operation, n] : r.errors) errors[operation] = n;
  return {{"descriptor_limit", r.descriptor_limit},
          {"open_descriptors", r.open_descriptors >= 0 ? json(r.open_descriptors) : json(nullptr)},
          {"job_connections", r.job_connections},
          {"max_connections", r.max_connections},
          {"refused_connections", r.refused_max_connections},
          {"refused_descriptor_reserve", r.refused_descriptor_reserve},
          {"accepts_guarded", AcceptGuard::Instance().interposed()},
          {"shm_bytes", r.shm_bytes},
          {"shm_limit_bytes", r.shm_limit_bytes},
          {"shm_refused", r.shm_refused},
          {"errors", errors}};
}

json RolloutJson(const std::string& model, const ModelRollout& r) {
  return {{"model", model},
          {"id", r.id},
          {"state", RolloutStateName(r.state)},
          {"replaced", r.replaced()},
          {"total", r.total},
          {"reason", r.reason},
          {"started_ms", r.started_ms},
          {"finished_ms", r.finished_ms}};
}

json ScaleReply(const ScaleResult& result) {
  return result.ok() ? AdminOk(result.Describe()) : AdminError(result.Describe());
}

json LoadReply(const LoadResult& result) {
  if (!result.status.ok()) return AdminError(result.status.message());
  json reply = AdminOk("loading " + result.model + ": " + std::to_string(result.workers) +
                       " worker(s) starting; served once one is ready");
  reply["model"] = result.model;
  return reply;
}

json UnloadReply(const UnloadResult& result) {
  if (!result.status.ok()) return AdminError(result.status.message());
  json reply =
      AdminOk("unloading " + result.model + ": new requests get NOT_FOUND; its " +
              std::to_string(result.queued) + " queued request(s) and the batches in " +
              "flight finish, then its " + std::to_string(result.workers) + " worker(s) stop");
  reply["model"] = result.model;
  return reply;
}

Status ParseLoadRequest(const json& request, const std::string& config_file,
                        std::vector<ModelConfig>* out) {
  const std::string name = request["model"].get<std::string>();
  // Every version the entry loads (one for an entry without versions).
  std::vector<ModelConfig>& configs = *out;
  configs.clear();
  const std::string& file = config_file;
  if (auto entry = request.find("config"); entry != request.end()) {
    if (!entry->is_object()) {
      return InvalidArgument("load.config: expected a model entry object, got " +
                             std::string(entry->type_name()) + " " + entry->dump());
    }
    json with_name = *entry;
    if (!with_name.contains("name")) with_name["name"] = name;
    const std::string base = std::filesystem::path(file).parent_path().string();
    Status s = ParseModelConfig(with_name, "load.config", base, &configs);
    if (!s.ok()) return s;
    if (!configs.empty() && configs[0].name != name) {
      return InvalidArgument("load.config.name: expected \"" + name +
                             "\" (the model field), got \"" + configs[0].name + "\"");
    }
  } else {
    FarmConfig fresh;
    Status s = LoadConfigFile(file, &fresh);
    if (!s.ok()) return Status(s.code(), "load refused: " + s.message());
    for (const ModelConfig& m : fresh.models) {
      if (m.name == name) configs.push_back(m);
    }
    if (configs.empty()) {
      return InvalidArgument(file + ": models has no entry named '" + name + "' (it has: " +
                             ModelNames(fresh.models) + "); pass the entry with --config-json");
    }
  }
  return Status::Ok();
}

}  // namespace torchfarm
