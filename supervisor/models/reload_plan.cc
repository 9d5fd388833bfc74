#include "supervisor/models/reload_plan.h"

#include <algorithm>
#include <utility>

#include "common/worker_count.h"

namespace torchfarm {

bool SameInstance(const InstanceConfig& a, const InstanceConfig& b) {
  return a.device == b.device && a.threads == b.threads && a.cores == b.cores &&
         a.fallback == b.fallback && a.precision == b.precision && a.streams == b.streams &&
         a.cudnn_benchmark == b.cudnn_benchmark && a.pin_memory == b.pin_memory &&
         a.idle_spin_us == b.idle_spin_us;
}

namespace {

// Changes the running workers must not serve through while they are replaced.
bool OldWorkersCannotServe(const ModelConfig& old_config, const ModelConfig& fresh) {
  return old_config.slot_bytes != fresh.slot_bytes || old_config.ring_slots != fresh.ring_slots ||
         old_config.max_inflight_per_worker != fresh.max_inflight_per_worker ||
         !(old_config.inputs == fresh.inputs);
}

// Changes that a running worker cannot pick up: it must be replaced. The warm-up runs once,
// before a worker reports ready, so a new one only reaches new workers.
bool NeedsNewWorkers(const ModelConfig& old_config, const ModelConfig& fresh) {
  return old_config.path != fresh.path || old_config.format != fresh.format ||
         old_config.optimize != fresh.optimize || !(old_config.warmup == fresh.warmup) ||
         !(old_config.pipeline == fresh.pipeline) || OldWorkersCannotServe(old_config, fresh);
}

// True when both identities are known and differ.
bool FileChanged(const ModelFiles& files, const ModelConfig& model) {
  auto served = files.served.find(ModelFiles::Key(model));
  auto fresh = files.fresh.find(ModelFiles::Key(model));
  return served != files.served.end() && fresh != files.fresh.end() &&
         served->second != fresh->second;
}

}  // namespace

std::vector<InstanceConfig> ExpandInstances(const ModelConfig& model, int available_cores) {
  std::vector<InstanceConfig> out;
  for (const auto& instance : model.instances) {
    int count = ResolveInstanceCount(instance, available_cores);
    // "auto" entries next to fixed ones stop at the one bound (common/worker_count.h).
    for (int i = 0; i < count && out.size() < static_cast<size_t>(kMaxWorkersPerModel); ++i) {
      out.push_back(instance);
    }
  }
  return out;
}

bool WorkerNeedsReplacing(const ModelUpdate& update, const InstanceConfig& current,
                          const InstanceConfig& wanted) {
  return update.replace_workers || !SameInstance(current, wanted);
}

namespace {

// Appends `key` to `out` when `differs`: the keys whose change only a restart applies.
struct ChangedKeys {
  std::vector<std::string>* out;
  void operator()(bool differs, const char* key) const {
    if (differs) out->emplace_back(key);
  }
};

}  // namespace

std::vector<std::string> FrontendChangesNeedingRestart(const FrontendConfig& running,
                                                       const FrontendConfig& fresh) {
  std::vector<std::string> changed;
  const ChangedKeys note{&changed};
  note(running.http_endpoint != fresh.http_endpoint, "http_endpoint");
  note(running.grpc_endpoint != fresh.grpc_endpoint, "grpc_endpoint");
  note(running.threads != fresh.threads, "frontend.threads");
  note(running.max_connections != fresh.max_connections, "frontend.max_connections");
  note(running.idle_timeout_ms != fresh.idle_timeout_ms, "frontend.idle_timeout_ms");
  note(running.request_timeout_ms != fresh.request_timeout_ms, "frontend.request_timeout_ms");
  note(running.max_header_bytes != fresh.max_header_bytes, "frontend.max_header_bytes");
  note(running.max_body_bytes != fresh.max_body_bytes, "frontend.max_body_bytes");
  note(running.max_inflight_body_bytes != fresh.max_inflight_body_bytes,
       "frontend.max_inflight_body_bytes");
  note(running.tls.cert_file != fresh.tls.cert_file || running.tls.key_file != fresh.tls.key_file,
       "frontend.tls");
  note(running.dashboard != fresh.dashboard, "frontend.dashboard");
  note(running.model_control != fresh.model_control, "frontend.model_control");
  note(running.log_control != fresh.log_control, "frontend.log_control");
  note(running.system_shared_memory != fresh.system_shared_memory, "frontend.system_shared_memory");
  note(running.client_id_header != fresh.client_id_header, "frontend.client_id_header");
  return changed;
}

ReloadPlan PlanReload(const FarmConfig& running, const std::vector<ModelConfig>& served,
                      const FarmConfig& fresh, int available_cores, const ModelFiles& files) {
  ReloadPlan plan;
  const ChangedKeys changed{&plan.needs_restart};
  changed(fresh.endpoint != running.endpoint, "endpoint");
  changed(fresh.admin_endpoint != running.admin_endpoint, "admin_endpoint");
  changed(fresh.run_dir != running.run_dir, "run_dir");
  changed(fresh.metrics_endpoint != running.metrics_endpoint, "metrics_endpoint");
  changed(fresh.worker_binary != running.worker_binary, "worker_binary");
  changed(fresh.ipc_group != running.ipc_group, "ipc_group");
  changed(fresh.insecure != running.insecure, "insecure");
  changed(fresh.curve.secret_key_file != running.curve.secret_key_file, "curve.secret_key_file");
  changed(fresh.gpu.mps != running.gpu.mps, "gpu.mps");
  // The front ends start once, with the supervisor.
  for (std::string& key : FrontendChangesNeedingRestart(running.frontend, fresh.frontend)) {
    plan.needs_restart.push_back(std::move(key));
  }
  for (const ModelConfig& m : fresh.models) {
    auto old = std::find_if(served.begin(), served.end(), [&](const ModelConfig& s) {
      return s.name == m.name && s.version == m.version;
    });
    if (old == served.end()) {
      plan.added.push_back(m);
      continue;
    }
    ModelUpdate update;
    update.config = m;
    update.file_changed = FileChanged(files, m);
    update.replace_workers = NeedsNewWorkers(*old, m) || update.file_changed;
    update.replace_at_once = OldWorkersCannotServe(*old, m);
    update.instances = ExpandInstances(m, available_cores);
    plan.updated.push_back(std::move(update));
  }
  for (const ModelConfig& s : served) {
    bool kept = std::any_of(fresh.models.begin(), fresh.models.end(), [&](const ModelConfig& m) {
      return m.name == s.name && m.version == s.version;
    });
    if (!kept) plan.removed.push_back(s);
  }
  return plan;
}

}  // namespace torchfarm
