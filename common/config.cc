#include "common/config.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/bytes_items.h"
#include "common/model_versions.h"
#include "common/number_parse.h"
#include "common/worker_count.h"
#include "common/protocol.h"
#include "common/tensor_names.h"

namespace torchfarm {

using nlohmann::json;

namespace {

// A CPU number in "cores": Linux builds for at most 8192 CPUs (NR_CPUS).
constexpr int64_t kMaxCoreNumber = 8191;
// "limits.max_shm_bytes": one 4 MiB worker segment at least, 1 PiB at most.
constexpr int64_t kMinShmBytes = int64_t{1} << 20;
constexpr int64_t kMaxShmBytes = int64_t{1} << 50;

// Rejects keys outside `allowed`, naming them and listing what is accepted.
Status CheckKeys(const json& j, const std::string& where, const std::vector<std::string>& allowed) {
  for (const auto& [key, value] : j.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return InvalidArgument(where + ": unknown key '" + key + "' (expected one of: " + list + ")");
    }
  }
  return Status::Ok();
}

std::string Got(const json& v) { return std::string(v.type_name()) + " " + v.dump(); }

Status GetString(const json& j, const std::string& key, const std::string& where, bool required,
                 std::string* out) {
  auto it = j.find(key);
  if (it == j.end()) {
    return required ? InvalidArgument(where + "." + key + ": required string is missing")
                    : Status::Ok();
  }
  if (!it->is_string() || it->get<std::string>().empty()) {
    return InvalidArgument(where + "." + key + ": expected a non-empty string, got " + Got(*it));
  }
  *out = it->get<std::string>();
  return Status::Ok();
}

// Every integer key: its real type and range (common/number_parse.h), never wrapped or truncated.
template <typename Int>
Status GetInt(const json& j, const std::string& key, const std::string& where, int64_t min,
              int64_t max, Int* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  return IntegerFromJson(*it, where + "." + key, min, max, out);
}

Status GetBool(const json& j, const std::string& key, const std::string& where, bool* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  if (!it->is_boolean()) {
    return InvalidArgument(where + "." + key + ": expected true or false, got " + Got(*it));
  }
  *out = it->get<bool>();
  return Status::Ok();
}

bool ValidDevice(const std::string& device) {
  if (device == "cpu") return true;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5) return false;
  return std::all_of(device.begin() + 5, device.end(), [](char c) { return c >= '0' && c <= '9'; });
}

Status ParseInstance(const json& j, const std::string& where, InstanceConfig* out) {
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + Got(j));
  Status s = CheckKeys(j, where, {"device", "count", "threads", "cores", "fallback",
                                 "gpu_failures_before_fallback", "precision", "streams",
                                 "cudnn_benchmark", "pin_memory", "idle_spin_us", "spares"});
  if (!s.ok()) return s;
  InstanceConfig inst;
  if (s = GetString(j, "device", where, false, &inst.device); !s.ok()) return s;
  if (!ValidDevice(inst.device)) {
    return InvalidArgument(where + ".device: expected \"cpu\" or \"cuda:N\", got \"" + inst.device +
                           "\"");
  }
  if (auto c = j.find("count"); c != j.end()) {
    if (c->is_string() && c->get<std::string>() == "auto") {
      inst.count_auto = true;
    } else if (s = GetInt(j, "count", where, 0, kMaxWorkersPerModel, &inst.count); !s.ok()) {
      return InvalidArgument(s.message() + " or \"auto\"");
    }
  }
  if (s = GetInt(j, "threads", where, 1, 1024, &inst.threads); !s.ok()) return s;
  if (s = GetInt(j, "spares", where, 0, 64, &inst.spares); !s.ok()) return s;
  if (s = GetString(j, "fallback", where, false, &inst.fallback); !s.ok()) return s;
  if (inst.fallback != "cpu" && inst.fallback != "none") {
    return InvalidArgument(where + ".fallback: expected \"cpu\" or \"none\", got \"" +
                           inst.fallback + "\"");
  }
  if (s = GetInt(j, "gpu_failures_before_fallback", where, 1, 1000,
                 &inst.gpu_failures_before_fallback);
      !s.ok()) {
    return s;
  }
  if (s = GetString(j, "precision", where, false, &inst.precision); !s.ok()) return s;
  if (inst.precision != "fp32" && inst.precision != "fp16" && inst.precision != "bf16") {
    return InvalidArgument(where + ".precision: expected \"fp32\", \"fp16\" or \"bf16\", got \"" +
                           inst.precision + "\"");
  }
  if (s = GetInt(j, "streams", where, 1, 16, &inst.streams); !s.ok()) return s;
  if (inst.streams > 1 && !inst.is_gpu()) {
    return InvalidArgument(where + ".streams: " + std::to_string(inst.streams) +
                           " streams need a \"cuda:N\" device, got \"" + inst.device + "\"");
  }
  if (s = GetBool(j, "cudnn_benchmark", where, &inst.cudnn_benchmark); !s.ok()) return s;
  if (s = GetBool(j, "pin_memory", where, &inst.pin_memory); !s.ok()) return s;
  if (s = GetInt(j, "idle_spin_us", where, 0, 100'000, &inst.idle_spin_us); !s.ok()) return s;
  if (auto c = j.find("cores"); c != j.end()) {
    if (!c->is_array()) return InvalidArgument(where + ".cores: expected an array of core numbers");
    for (size_t k = 0; k < c->size(); ++k) {
      int core = 0;
      if (s = IntegerFromJson((*c)[k], where + ".cores[" + std::to_string(k) + "]", 0,
                              kMaxCoreNumber, &core);
          !s.ok())
        return s;
      inst.cores.push_back(core);
    }
  }
  *out = std::move(inst);
  return Status::Ok();
}

bool ValidModelName(const std::string& name) {
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

// One warm-up batch: an integer batch size (every other dimension from the declared inputs) or
// an array with one shape per input (dtypes from the declared inputs).
Status ParseWarmupEntry(const json& j, const std::string& where, const ModelConfig& m,
                        std::vector<TensorSpec>* out) {
  std::vector<TensorSpec> specs = m.inputs;
  if (j.is_number_integer()) {
    const int64_t rows = j.get<int64_t>();
    if (rows < 1 || rows > m.max_batch_size) {
      return InvalidArgument(where + ": expected a batch size in 1.." +
                             std::to_string(m.max_batch_size) + " (max_batch_size), got " + Got(j));
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      std::vector<int64_t>& shape = specs[i].shape;
      if (shape.empty()) {
        return InvalidArgument(where + ": input " + std::to_string(i) +
                               " is a scalar and has no batch dimension; give shapes instead");
      }
      shape[0] = rows;
      for (size_t d = 1; d < shape.size(); ++d) {
        if (shape[d] < 0) {
          return InvalidArgument(where + ": input " + std::to_string(i) + " declares shape " +
                                 ShapeToString(m.inputs[i].shape) +
                                 " with a free trailing dimension; give shapes, e.g. [[" +
                                 std::to_string(rows) + ", ...]]");
        }
      }
    }
  } else if (j.is_array() && j.size() == specs.size()) {
    for (size_t i = 0; i < specs.size(); ++i) {
      const json& shape = j[i];
      std::vector<int64_t> dims;
      if (shape.is_array()) {
        for (const auto& d : shape) {
          if (!d.is_number_integer() || d.get<int64_t>() < 0) break;
          dims.push_back(d.get<int64_t>());
        }
      }
      if (!shape.is_array() || dims.size() != shape.size()) {
        return InvalidArgument(where + "[" + std::to_string(i) +
                               "]: expected a shape of non-negative integers, got " + Got(shape));
      }
      TensorSpec got{m.inputs[i].dtype, dims};
      if (Status s = CheckAgainstDeclared(m.inputs[i], got, i); !s.ok()) {
        return InvalidArgument(where + ": " + s.message());
      }
      specs[i].shape = dims;
    }
  } else {
    return InvalidArgument(where + ": expected a batch size or an array of " +
                           std::to_string(specs.size()) + " shape(s) (one per input), got " + Got(j));
  }
  *out = std::move(specs);
  return Status::Ok();
}

Status ParseWarmup(const json& j, const std::string& where, const ModelConfig& m,
                   std::vector<std::vector<TensorSpec>>* out) {
  if (!j.is_array() || j.size() > 64) {
    return InvalidArgument(where + ": expected an array of at most 64 batch sizes or shape lists, "
                           "got " + Got(j));
  }
  for (size_t i = 0; i < j.size(); ++i) {
    std::vector<TensorSpec> entry;
    if (Status s = ParseWarmupEntry(j[i], where + "[" + std::to_string(i) + "]", m, &entry); !s.ok())
      return s;
    out->push_back(std::move(entry));
  }
  return Status::Ok();
}

Status ParseRollout(const json& j, const std::string& where, RolloutConfig* out) {
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + Got(j));
  Status s = CheckKeys(j, where, {"max_surge", "max_unavailable"});
  if (!s.ok()) return s;
  RolloutConfig r;
  if (s = GetInt(j, "max_surge", where, 0, 64, &r.max_surge); !s.ok()) return s;
  if (s = GetInt(j, "max_unavailable", where, 0, 64, &r.max_unavailable); !s.ok()) return s;
  if (r.max_surge == 0 && r.max_unavailable == 0) {
    return InvalidArgument(where + ": max_surge and max_unavailable are both 0: a rollout could "
                           "neither add a worker nor take one away (set one of them to 1 or more)");
  }
  *out = r;
  return Status::Ok();
}

// `path_required`: false where versions bring their own paths.
Status ParseModel(const json& j, const std::string& where, const std::string& base_dir,
                  bool path_required, ModelConfig* out) {
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + Got(j));
  Status s =
      CheckKeys(j, where,
                {"name", "path", "inputs", "outputs", "instances", "max_batch_size",
                 "max_queue_delay_us", "preferred_batch_sizes", "max_queue_size",
                 "max_queue_wait_ms", "max_inflight_per_worker", "priority_levels", "slot_bytes",
                 "ring_slots", "hang_timeout_ms", "warmup", "versions", "version_policy",
                 "rollout", "pipeline"});
  if (!s.ok()) return s;
  ModelConfig m;
  if (s = GetString(j, "name", where, true, &m.name); !s.ok()) return s;
  if (!ValidModelName(m.name)) {
    return InvalidArgument(where + ".name: expected letters, digits, '_', '-' or '.', got \"" +
                           m.name + "\"");
  }
  if (s = GetString(j, "path", where, path_required, &m.path); !s.ok()) return s;
  if (!m.path.empty()) {
    std::filesystem::path p(m.path);
    if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
    m.path = p.lexically_normal().string();
  }

  auto inputs = j.find("inputs");
  if (inputs == j.end()) {
    return InvalidArgument(where + ".inputs: expected a non-empty array of {\"dtype\", \"shape\"}");
  }
  // A request slot holds kMaxInputs tensors (ipc/slot_codec.h): more could never be served.
  s = NamedTensorListFromJson(*inputs, where + ".inputs", kMaxInputs, false, &m.inputs,
                              &m.input_names);
  if (!s.ok()) return s;
  if (auto outputs = j.find("outputs"); outputs != j.end()) {
    // A reply holds kMaxOutputs tensors: a model returning more fails every batch.
    s = NamedTensorListFromJson(*outputs, where + ".outputs", kMaxOutputs, true, &m.outputs,
                                &m.output_names);
    if (!s.ok()) return s;
  }
  if (auto inst = j.find("instances"); inst != j.end()) {
    if (!inst->is_array()) return InvalidArgument(where + ".instances: expected an array");
    for (size_t i = 0; i < inst->size(); ++i) {
      InstanceConfig ic;
      s = ParseInstance((*inst)[i], where + ".instances[" + std::to_string(i) + "]", &ic);
      if (!s.ok()) return s;
      m.instances.push_back(std::move(ic));
    }
  } else {
    m.instances.push_back(InstanceConfig{});
  }
  int64_t total_count = 0;
  for (const InstanceConfig& ic : m.instances) total_count += ic.count_auto ? 0 : ic.count;
  if (s = CheckWorkerCount(total_count, where + ".instances[].count (sum)"); !s.ok()) return s;
  if (s = GetInt(j, "max_batch_size", where, 1, 1 << 20, &m.max_batch_size); !s.ok()) return s;
  if (s = GetInt(j, "max_queue_delay_us", where, 0, 60'000'000, &m.max_queue_delay_us); !s.ok())
    return s;
  if (s = GetInt(j, "max_queue_size", where, 1, 10'000'000, &m.max_queue_size); !s.ok()) return s;
  if (s = GetInt(j, "max_queue_wait_ms", where, 0, 86'400'000, &m.max_queue_wait_ms); !s.ok())
    return s;
  if (s = GetInt(j, "max_inflight_per_worker", where, 1, 64, &m.max_inflight_per_worker); !s.ok())
    return s;
  if (s = GetInt(j, "priority_levels", where, 1, 16, &m.priority_levels); !s.ok()) return s;
  if (s = GetInt(j, "slot_bytes", where, 4096, int64_t{1} << 34, &m.slot_bytes); !s.ok()) return s;
  if (s = GetInt(j, "hang_timeout_ms", where, 0, 86'400'000, &m.hang_timeout_ms); !s.ok()) return s;
  m.ring_slots = std::max(4, m.max_inflight_per_worker);
  if (s = GetInt(j, "ring_slots", where, 1, 64, &m.ring_slots); !s.ok()) return s;
  if (m.ring_slots < m.max_inflight_per_worker) {
    return InvalidArgument(where + ".ring_slots: " + std::to_string(m.ring_slots) +
                           " is less than max_inflight_per_worker " +
                           std::to_string(m.max_inflight_per_worker));
  }
  if (auto pref = j.find("preferred_batch_sizes"); pref != j.end()) {
    if (!pref->is_array()) {
      return InvalidArgument(where + ".preferred_batch_sizes: expected an array of integers");
    }
    for (const auto& v : *pref) {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > m.max_batch_size) {
        return InvalidArgument(where + ".preferred_batch_sizes: expected integers in 1.." +
                               std::to_string(m.max_batch_size) + " (max_batch_size), got " +
                               Got(v));
      }
      m.preferred_batch_sizes.push_back(v.get<int64_t>());
    }
    std::sort(m.preferred_batch_sizes.begin(), m.preferred_batch_sizes.end());
  }
  for (size_t i = 0; i < m.instances.size(); ++i) {
    if (m.instances[i].streams > m.max_inflight_per_worker) {
      return InvalidArgument(where + ".instances[" + std::to_string(i) + "].streams: " +
                             std::to_string(m.instances[i].streams) +
                             " streams need at least as many batches in flight, but "
                             "max_inflight_per_worker is " +
                             std::to_string(m.max_inflight_per_worker) + " (raise it)");
    }
  }
  if (auto warmup = j.find("warmup"); warmup != j.end()) {
    if (s = ParseWarmup(*warmup, where + ".warmup", m, &m.warmup); !s.ok()) return s;
  }
  if (auto rollout = j.find("rollout"); rollout != j.end()) {
    if (s = ParseRollout(*rollout, where + ".rollout", &m.rollout); !s.ok()) return s;
  }
  if (auto pipeline = j.find("pipeline"); pipeline != j.end()) {
    s = ParsePipelineConfig(*pipeline, where + ".pipeline", base_dir, m.inputs, !m.warmup.empty(),
                            &m.pipeline);
  } else {
    s = CheckInputsWithoutPipeline(m.inputs, where);
  }
  if (!s.ok()) return s;
  *out = std::move(m);
  return Status::Ok();
}

// "versions": [{"version", "path"}, ...]; a version without "path" takes the entry's.
Status ParseVersionList(const json& j, const std::string& where, const std::string& base_dir,
                        const std::string& entry_path, std::vector<VersionSource>* out) {
  if (!j.is_array() || j.empty() || j.size() > kMaxVersions) {
    return InvalidArgument(where + ": expected an array of 1.." + std::to_string(kMaxVersions) +
                           " {\"version\", \"path\"} objects, got " + Got(j));
  }
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!j[i].is_object()) return InvalidArgument(at + ": expected an object, got " + Got(j[i]));
    Status s = CheckKeys(j[i], at, {"version", "path"});
    if (!s.ok()) return s;
    VersionSource source;
    if (s = GetString(j[i], "version", at, true, &source.version); !s.ok()) return s;
    if (!ValidVersion(source.version)) {
      return InvalidArgument(at + ".version: expected 1.." + std::to_string(kMaxVersionLength) +
                             " letters, digits, '_', '-' or '.', got \"" + source.version + "\"");
    }
    for (const VersionSource& seen : *out) {
      if (seen.version == source.version) {
        return InvalidArgument(at + ".version: version \"" + source.version + "\" is listed twice");
      }
    }
    if (s = GetString(j[i], "path", at, entry_path.empty(), &source.path); !s.ok()) {
      return InvalidArgument(s.message() + " (the model entry has no \"path\" to fall back on)");
    }
    if (source.path.empty()) {
      source.path = entry_path;
    } else {
      std::filesystem::path p(source.path);
      if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
      source.path = p.lexically_normal().string();
    }
    out->push_back(std::move(source));
  }
  return Status::Ok();
}

// One ModelConfig per version the entry's version_policy loads, ascending: from its "versions",
// from `repository` (a model_repository folder's versions), or the entry alone as version "1".
Status ParseModelVersions(const json& j, const std::string& where, const std::string& base_dir,
                          const std::vector<VersionSource>* repository,
                          std::vector<ModelConfig>* out) {
  ModelConfig m;
  const bool listed = j.is_object() && j.contains("versions");
  Status s = ParseModel(j, where, base_dir, !repository && !listed, &m);
  if (!s.ok()) return s;
  std::vector<VersionSource> sources;
  if (repository) {
    sources = *repository;
  } else if (listed) {
    if (s = ParseVersionList(j["versions"], where + ".versions", base_dir, m.path, &sources);
        !s.ok())
      return s;
  } else {
    sources.push_back({kDefaultModelVersion, m.path});
  }
  VersionPolicy policy;
  if (auto p = j.find("version_policy"); p != j.end()) {
    if (s = ParseVersionPolicy(*p, where + ".version_policy", &policy); !s.ok()) return s;
  }
  std::vector<std::string> available, chosen;
  for (const VersionSource& source : sources) available.push_back(source.version);
  if (s = ApplyVersionPolicy(policy, available, where + ".version_policy", &chosen); !s.ok())
    return s;
  for (const std::string& version : chosen) {
    ModelConfig copy = m;
    copy.version = version;
    for (const VersionSource& source : sources) {
      if (source.version == version) copy.path = source.path;
    }
    out->push_back(std::move(copy));
  }
  return Status::Ok();
}

// "model_repository": each DIR/NAME folder's config.json is a model entry without "path" (and
// without "versions"; "name", if given, must be NAME); its VERSION/model.pt files are the versions.
Status ParseRepository(const std::string& dir, const std::string& base_dir,
                       std::vector<ModelConfig>* out) {
  const std::string where = "config.model_repository";
  std::vector<RepositoryModel> models;
  if (Status s = ScanModelRepository(dir, where, &models); !s.ok()) return s;
  for (RepositoryModel& model : models) {
    const std::string at = where + " '" + dir + "/" + model.name + "/config.json'";
    for (const char* key : {"path", "versions"}) {
      if (model.entry.contains(key)) {
        return InvalidArgument(at + ": unexpected key '" + key +
                               "' (a repository model's versions are its VERSION/model.pt files)");
      }
    }
    if (auto name = model.entry.find("name");
        name != model.entry.end() && (!name->is_string() || *name != model.name)) {
      return InvalidArgument(at + ".name: expected the folder's name \"" + model.name +
                             "\" or nothing, got " + Got(*name));
    }
    model.entry["name"] = model.name;
    if (Status s = ParseModelVersions(model.entry, at, base_dir, &model.versions, out); !s.ok())
      return s;
  }
  return Status::Ok();
}

}  // namespace

static Status ParseRestart(const json& j, RestartConfig* out) {
  const std::string where = "config.restart";
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + Got(j));
  Status s = CheckKeys(j, where, {"initial_backoff_ms", "max_backoff_ms", "max_restarts",
                                  "window_ms", "healthy_after_ms", "failed_retry_ms"});
  if (!s.ok()) return s;
  RestartConfig r;
  if (s = GetInt(j, "initial_backoff_ms", where, 0, 3'600'000, &r.initial_backoff_ms); !s.ok()) return s;
  if (s = GetInt(j, "max_backoff_ms", where, 0, 3'600'000, &r.max_backoff_ms); !s.ok()) return s;
  if (s = GetInt(j, "max_restarts", where, 0, 1'000'000, &r.max_restarts); !s.ok()) return s;
  if (s = GetInt(j, "window_ms", where, 1, 86'400'000, &r.window_ms); !s.ok()) return s;
  if (s = GetInt(j, "healthy_after_ms", where, 0, 86'400'000, &r.healthy_after_ms); !s.ok()) return s;
  if (s = GetInt(j, "failed_retry_ms", where, 1'000, 86'400'000, &r.failed_retry_ms); !s.ok()) return s;
  *out = r;
  return Status::Ok();
}

static Status ParseGpu(const json& j, GpuConfig* out) {
  const std::string where = "config.gpu";
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + Got(j));
  Status s = CheckKeys(j, where, {"mps", "active_thread_percentage", "mps_control"});
  if (!s.ok()) return s;
  GpuConfig g;
  if (s = GetString(j, "mps", where, false, &g.mps); !s.ok()) return s;
  if (g.mps != "off" && g.mps != "auto" && g.mps != "required") {
    return InvalidArgument(where + ".mps: expected \"off\", \"auto\" or \"required\", got \"" +
                           g.mps + "\"");
  }
  if (s = GetInt(j, "active_thread_percentage", where, 1, 100, &g.active_thread_percentage); !s.ok())
    return s;
  if (s = GetString(j, "mps_control", where, false, &g.mps_control); !s.ok()) return s;
  *out = std::move(g);
  return Status::Ok();
}

static Status ParseClientShm(const json& j, ClientShmConfig* out) {
  const std::string where = "config.client_shm";
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + Got(j));
  Status s = CheckKeys(j, where, {"enabled", "max_region_bytes", "max_total_bytes", "max_regions",
                                  "max_regions_per_client", "idle_timeout_s", "in_place"});
  if (!s.ok()) return s;
  ClientShmConfig c;
  constexpr int64_t kTiB = int64_t{1} << 40;
  if (s = GetBool(j, "enabled", where, &c.enabled); !s.ok()) return s;
  if (s = GetBool(j, "in_place", where, &c.in_place); !s.ok()) return s;
  if (s = GetInt(j, "max_region_bytes", where, 1, kTiB, &c.max_region_bytes); !s.ok()) return s;
  if (s = GetInt(j, "max_total_bytes", where, 1, kTiB, &c.max_total_bytes); !s.ok()) return s;
  if (s = GetInt(j, "max_regions", where, 1, 65536, &c.max_regions); !s.ok()) return s;
  if (s = GetInt(j, "max_regions_per_client", where, 1, 65536, &c.max_regions_per_client); !s.ok())
    return s;
  if (s = GetInt(j, "idle_timeout_s", where, 1, 30 * 86400, &c.idle_timeout_s); !s.ok()) return s;
  *out = c;
  return Status::Ok();
}

static Status ParseCurve(const json& j, const std::string& base_dir, CurveConfig* out) {
  const std::string where = "config.curve";
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + Got(j));
  Status s = CheckKeys(j, where, {"secret_key_file", "authorized_clients_dir"});
  if (!s.ok()) return s;
  CurveConfig c;
  if (s = GetString(j, "secret_key_file", where, true, &c.secret_key_file); !s.ok()) return s;
  if (s = GetString(j, "authorized_clients_dir", where, true, &c.authorized_clients_dir); !s.ok())
    return s;
  for (std::string* path : {&c.secret_key_file, &c.authorized_clients_dir}) {
    std::filesystem::path p(*path);
    if (p.is_relative()) *path = (std::filesystem::path(base_dir) / p).lexically_normal().string();
  }
  *out = std::move(c);
  return Status::Ok();
}

static Status ParseFrontendEndpoint(const json& j, const char* key, const FarmConfig& c,
                                    std::string* out) {
  Status s = GetString(j, key, "config", false, out);
  if (!s.ok() || out->empty()) return s;
  const std::string where = std::string("config.") + key;
  std::string host;
  int port = 0;
  if (s = SplitHostPort(*out, where, &host, &port); !s.ok()) return s;
  if (!IsLocalEndpoint("tcp://" + host + ":" + std::to_string(port)) &&
      !c.frontend.tls.enabled() && !c.insecure) {
    return InvalidArgument(where + ": \"" + *out +
                           "\" is reachable from the network but \"frontend.tls\" is not "
                           "configured; set \"frontend\": {\"tls\": {\"cert_file\", \"key_file\"}} "
                           "(docs/security.md), bind a loopback address, or set \"insecure\": "
                           "true to serve unauthenticated clients anyway");
  }
  return Status::Ok();
}

static Status ParseFrontend(const json& j, const std::string& base_dir, FrontendConfig* out) {
  const std::string where = "config.frontend";
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + Got(j));
  Status s = CheckKeys(j, where, {"threads", "max_connections", "idle_timeout_ms",
                                  "request_timeout_ms", "max_header_bytes", "max_body_bytes",
                                  "max_inflight_body_bytes", "tls"});
  if (!s.ok()) return s;
  FrontendConfig f;
  if (s = GetInt(j, "threads", where, 1, 64, &f.threads); !s.ok()) return s;
  if (s = GetInt(j, "max_connections", where, 1, 1'000'000, &f.max_connections); !s.ok()) return s;
  if (s = GetInt(j, "idle_timeout_ms", where, 100, 86'400'000, &f.idle_timeout_ms); !s.ok())
    return s;
  if (s = GetInt(j, "request_timeout_ms", where, 100, 86'400'000, &f.request_timeout_ms); !s.ok())
    return s;
  if (s = GetInt(j, "max_header_bytes", where, 1024, 1 << 20, &f.max_header_bytes); !s.ok())
    return s;
  if (s = GetInt(j, "max_body_bytes", where, 1024, int64_t{4} << 30, &f.max_body_bytes); !s.ok())
    return s;
  if (s = GetInt(j, "max_inflight_body_bytes", where, 1024, int64_t{1} << 40,
                 &f.max_inflight_body_bytes);
      !s.ok())
    return s;
  if (f.max_inflight_body_bytes < f.max_body_bytes) {
    return InvalidArgument(where + ".max_inflight_body_bytes: expected at least max_body_bytes (" +
                           std::to_string(f.max_body_bytes) + "), got " +
                           std::to_string(f.max_inflight_body_bytes));
  }
  if (auto tls = j.find("tls"); tls != j.end()) {
    const std::string tls_where = where + ".tls";
    if (!tls->is_object()) return InvalidArgument(tls_where + ": expected an object, got " + Got(*tls));
    if (s = CheckKeys(*tls, tls_where, {"cert_file", "key_file"}); !s.ok()) return s;
    if (s = GetString(*tls, "cert_file", tls_where, true, &f.tls.cert_file); !s.ok()) return s;
    if (s = GetString(*tls, "key_file", tls_where, true, &f.tls.key_file); !s.ok()) return s;
    for (std::string* path : {&f.tls.cert_file, &f.tls.key_file}) {
      std::filesystem::path p(*path);
      if (p.is_relative()) *path = (std::filesystem::path(base_dir) / p).lexically_normal().string();
    }
  }
  *out = std::move(f);
  return Status::Ok();
}

// Defaults that depend on the models: a request never needs more than the largest ring slot plus
// its header, so that is what the socket accepts unless the config says otherwise.
static Status ParseLimits(const json* j, const std::vector<ModelConfig>& models, LimitsConfig* out) {
  const std::string where = "config.limits";
  LimitsConfig l;
  l.request.max_item_bytes = kDefaultMaxItemBytes;
  uint64_t largest_slot = 0;
  for (const auto& m : models) largest_slot = std::max(largest_slot, m.slot_bytes);
  int64_t max_frames = static_cast<int64_t>(kMaxInputs) + 1;
  bool tensor_set = false, request_set = false;
  if (j) {
    if (!j->is_object()) return InvalidArgument(where + ": expected an object, got " + Got(*j));
    Status s = CheckKeys(*j, where, {"max_header_bytes", "max_frames", "max_tensor_bytes",
                                     "max_rank", "max_request_bytes", "max_queued_per_client",
                                     "max_shm_bytes", "max_item_bytes"});
    if (!s.ok()) return s;
    RequestLimits& r = l.request;
    if (s = GetInt(*j, "max_item_bytes", where, 1, kMaxBytesItem, &r.max_item_bytes); !s.ok())
      return s;
    if (s = GetInt(*j, "max_header_bytes", where, 256, 16 << 20, &r.max_header_bytes); !s.ok())
      return s;
    if (s = GetInt(*j, "max_frames", where, 2, 1025, &max_frames); !s.ok()) return s;
    if (s = GetInt(*j, "max_rank", where, 0, kMaxRank, &r.max_rank); !s.ok()) return s;
    if (s = GetInt(*j, "max_tensor_bytes", where, 0, int64_t{1} << 40, &r.max_tensor_bytes); !s.ok())
      return s;
    if (s = GetInt(*j, "max_request_bytes", where, 1024, int64_t{1} << 40, &r.max_request_bytes);
        !s.ok())
      return s;
    if (s = GetInt(*j, "max_queued_per_client", where, 1, 10'000'000, &l.max_queued_per_client);
        !s.ok())
      return s;
    if (s = GetInt(*j, "max_shm_bytes", where, kMinShmBytes, kMaxShmBytes, &l.max_shm_bytes); !s.ok())
      return s;
    tensor_set = j->contains("max_tensor_bytes");
    request_set = j->contains("max_request_bytes");
  }
  l.request.max_inputs = static_cast<size_t>(max_frames - 1);
  if (!request_set) l.request.max_request_bytes = largest_slot + l.request.max_header_bytes;
  if (!tensor_set) l.request.max_tensor_bytes = l.request.max_request_bytes;
  *out = l;
  return Status::Ok();
}

bool IsLocalEndpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  std::string rest = endpoint.substr(6);
  // A "source;destination" form names a remote peer; never local for a bind.
  if (rest.find(';') != std::string::npos) return false;
  std::string host;
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos) return false;
    host = rest.substr(1, close - 1);
  } else {
    size_t colon = rest.rfind(':');
    host = colon == std::string::npos ? rest : rest.substr(0, colon);
  }
  if (host == "localhost" || host == "::1" || host == "lo") return true;
  // 127.0.0.0/8, written as four decimal octets.
  int a, b, c, d;
  char tail;
  if (std::sscanf(host.c_str(), "%d.%d.%d.%d%c", &a, &b, &c, &d, &tail) != 4) return false;
  return a == 127 && b >= 0 && b <= 255 && c >= 0 && c <= 255 && d >= 0 && d <= 255;
}

Status SplitHostPort(const std::string& text, const std::string& where, std::string* host,
                     int* port) {
  const size_t colon = text.rfind(':');
  std::string h = colon == std::string::npos ? std::string() : text.substr(0, colon);
  const std::string p = colon == std::string::npos ? std::string() : text.substr(colon + 1);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  bool digits = !p.empty() && p.size() <= 5;
  for (char ch : p) digits = digits && ch >= '0' && ch <= '9';
  const int value = digits ? std::stoi(p) : -1;
  if (h.empty() || !digits || value > 65535) {
    return InvalidArgument(where + ": expected \"HOST:PORT\" with a port 0..65535 (e.g. "
                           "\"127.0.0.1:8000\"), got \"" + text + "\"");
  }
  *host = h;
  *port = value;
  return Status::Ok();
}

// The job socket may face the network only with CURVE (or an explicit "insecure": true); the admin
// socket never faces it, and a TCP admin socket needs CURVE even on loopback.
static Status CheckEndpointSecurity(const FarmConfig& c) {
  if (!IsLocalEndpoint(c.endpoint) && !c.curve.enabled() && !c.insecure) {
    return InvalidArgument("config.endpoint: \"" + c.endpoint +
                           "\" is reachable from the network but \"curve\" is not configured; "
                           "set \"curve\": {\"secret_key_file\", \"authorized_clients_dir\"} "
                           "(docs/security.md), bind a loopback or ipc endpoint, or set "
                           "\"insecure\": true to serve unauthenticated clients anyway");
  }
  const std::string& admin = c.admin_endpoint;
  if (admin.rfind("ipc://", 0) == 0) return Status::Ok();
  if (admin.rfind("tcp://", 0) != 0 || !IsLocalEndpoint(admin)) {
    return InvalidArgument("config.admin_endpoint: \"" + admin +
                           "\" must be ipc://PATH or a loopback tcp:// endpoint with \"curve\"; "
                           "the admin socket never faces the network");
  }
  if (!c.curve.enabled()) {
    return InvalidArgument("config.admin_endpoint: tcp endpoint \"" + admin +
                           "\" needs \"curve\" (any local user could connect to it); use "
                           "ipc://PATH (the default) or configure \"curve\"");
  }
  return Status::Ok();
}

Status ParseConfig(const json& j, const std::string& base_dir, FarmConfig* out) {
  if (!j.is_object()) return InvalidArgument("config: expected a JSON object, got " + Got(j));
  Status s = CheckKeys(
      j, "config",
      {"endpoint", "admin_endpoint", "run_dir",          "heartbeat_ms", "worker_binary",
       "models",   "max_retries",    "drain_timeout_ms", "restart",      "metrics_endpoint",
       "curve",    "insecure",       "ipc_group",        "limits",       "client_shm",
       "gpu",      "http_endpoint",  "grpc_endpoint",    "frontend",     "model_repository",
       "model_repository_poll_s", "worker_launch", "max_connections"});
  if (!s.ok()) return s;
  FarmConfig c;
  if (s = GetString(j, "endpoint", "config", false, &c.endpoint); !s.ok()) return s;
  if (s = GetString(j, "run_dir", "config", false, &c.run_dir); !s.ok()) return s;
  if (std::filesystem::path(c.run_dir).is_relative()) {
    c.run_dir = (std::filesystem::path(base_dir) / c.run_dir).lexically_normal().string();
  }
  c.admin_endpoint = "ipc://" + c.run_dir + "/admin.sock";
  if (s = GetString(j, "admin_endpoint", "config", false, &c.admin_endpoint); !s.ok()) return s;
  if (c.admin_endpoint == c.endpoint) {
    return InvalidArgument("config.admin_endpoint: must differ from endpoint \"" + c.endpoint +
                           "\"");
  }
  if (s = GetInt(j, "heartbeat_ms", "config", 10, 600'000, &c.heartbeat_ms); !s.ok()) return s;
  if (s = GetString(j, "worker_binary", "config", false, &c.worker_binary); !s.ok()) return s;
  if (s = GetString(j, "worker_launch", "config", false, &c.worker_launch); !s.ok()) return s;
  if (c.worker_launch != "zygote" && c.worker_launch != "exec") {
    return InvalidArgument("config.worker_launch: expected \"zygote\" or \"exec\", got \"" +
                           c.worker_launch + "\"");
  }
  if (s = GetInt(j, "model_repository_poll_s", "config", 0, 86'400, &c.model_repository_poll_s);
      !s.ok())
    return s;
  if (s = GetInt(j, "max_retries", "config", 0, 100, &c.max_retries); !s.ok()) return s;
  if (s = GetInt(j, "max_connections", "config", 1, kMaxJobConnections, &c.max_connections); !s.ok())
    return s;
  if (s = GetString(j, "metrics_endpoint", "config", false, &c.metrics_endpoint); !s.ok()) return s;
  if (s = GetInt(j, "drain_timeout_ms", "config", 0, kMaxDrainTimeoutMs, &c.drain_timeout_ms); !s.ok())
    return s;
  if (auto r = j.find("restart"); r != j.end()) {
    if (s = ParseRestart(*r, &c.restart); !s.ok()) return s;
  }
  if (auto curve = j.find("curve"); curve != j.end()) {
    if (s = ParseCurve(*curve, base_dir, &c.curve); !s.ok()) return s;
  }
  if (auto gpu = j.find("gpu"); gpu != j.end()) {
    if (s = ParseGpu(*gpu, &c.gpu); !s.ok()) return s;
  }
  if (auto shm = j.find("client_shm"); shm != j.end()) {
    if (s = ParseClientShm(*shm, &c.client_shm); !s.ok()) return s;
  }
  if (s = GetBool(j, "insecure", "config", &c.insecure); !s.ok()) return s;
  if (s = GetString(j, "ipc_group", "config", false, &c.ipc_group); !s.ok()) return s;
  if (!c.ipc_group.empty() && c.endpoint.rfind("ipc://", 0) != 0) {
    return InvalidArgument("config.ipc_group: applies to an ipc:// endpoint only, endpoint is \"" +
                           c.endpoint + "\"");
  }
  if (s = CheckEndpointSecurity(c); !s.ok()) return s;
  if (auto frontend = j.find("frontend"); frontend != j.end()) {
    if (s = ParseFrontend(*frontend, base_dir, &c.frontend); !s.ok()) return s;
  }
  if (s = ParseFrontendEndpoint(j, "http_endpoint", c, &c.frontend.http_endpoint); !s.ok()) return s;
  if (s = ParseFrontendEndpoint(j, "grpc_endpoint", c, &c.frontend.grpc_endpoint); !s.ok()) return s;
  if (!c.frontend.http_endpoint.empty() && c.frontend.http_endpoint == c.frontend.grpc_endpoint &&
      c.frontend.http_endpoint.substr(c.frontend.http_endpoint.rfind(':')) != ":0") {
    return InvalidArgument("config.grpc_endpoint: must differ from http_endpoint \"" +
                           c.frontend.http_endpoint + "\"");
  }
  if (s = GetString(j, "model_repository", "config", false, &c.model_repository); !s.ok()) return s;
  if (!c.model_repository.empty()) {
    std::filesystem::path p(c.model_repository);
    if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
    c.model_repository = p.lexically_normal().string();
    if (!c.model_repository.empty() && c.model_repository.back() == '/')
      c.model_repository.pop_back();
  }
  auto models = j.find("models");
  const bool need_models = c.model_repository.empty();
  if ((models == j.end() && need_models) ||
      (models != j.end() && (!models->is_array() || (models->empty() && need_models)))) {
    return InvalidArgument(
        "config.models: expected a non-empty array of models (or a "
        "\"model_repository\")");
  }
  std::set<std::string> names;
  const size_t listed = models == j.end() ? 0 : models->size();
  for (size_t i = 0; i < listed; ++i) {
    const std::string where = "config.models[" + std::to_string(i) + "]";
    std::vector<ModelConfig> versions;
    s = ParseModelVersions((*models)[i], where, base_dir, nullptr, &versions);
    if (!s.ok()) return s;
    if (!names.insert(versions.front().name).second) {
      return InvalidArgument(where + ".name: model \"" + versions.front().name +
                             "\" is declared twice (list its versions in one entry's "
                             "\"versions\")");
    }
    for (ModelConfig& m : versions) c.models.push_back(std::move(m));
  }
  if (!c.model_repository.empty()) {
    std::vector<ModelConfig> found;
    if (s = ParseRepository(c.model_repository, base_dir, &found); !s.ok()) return s;
    for (ModelConfig& m : found) {
      if (names.count(m.name)) {
        return InvalidArgument("config.model_repository: model \"" + m.name +
                               "\" is also declared in config.models");
      }
      c.models.push_back(std::move(m));
    }
    if (c.models.empty()) {
      return InvalidArgument("config.model_repository: '" + c.model_repository +
                             "' holds no model and config.models lists none");
    }
  }
  auto limits = j.find("limits");
  if (s = ParseLimits(limits == j.end() ? nullptr : &*limits, c.models, &c.limits); !s.ok())
    return s;
  *out = std::move(c);
  return Status::Ok();
}

Status ParseModelConfig(const json& j, const std::string& where, const std::string& base_dir,
                        std::vector<ModelConfig>* out) {
  out->clear();
  return ParseModelVersions(j, where, base_dir, nullptr, out);
}

Status LoadConfigFile(const std::string& path, FarmConfig* out) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open config file '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  json j = json::parse(buffer.str(), nullptr, false);
  if (j.is_discarded()) return InvalidArgument("config file '" + path + "' is not valid JSON");
  auto base = std::filesystem::absolute(path).parent_path().string();
  Status s = ParseConfig(j, base, out);
  if (!s.ok()) return Status(s.code(), path + ": " + s.message());
  out->source_path = std::filesystem::absolute(path).string();
  return Status::Ok();
}

std::string WarmupToJson(const std::vector<std::vector<TensorSpec>>& warmup) {
  json entries = json::array();
  for (const auto& entry : warmup) {
    json specs = json::array();
    for (const TensorSpec& spec : entry) specs.push_back(TensorSpecToJson(spec));
    entries.push_back(std::move(specs));
  }
  return entries.dump();
}

Status WarmupFromJson(const std::string& text, std::vector<std::vector<TensorSpec>>* out) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_array()) return InvalidArgument("--warmup: expected a JSON array, got '" + text + "'");
  out->clear();
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_array()) return InvalidArgument("--warmup[" + std::to_string(i) + "]: expected an array");
    std::vector<TensorSpec> entry;
    for (size_t k = 0; k < j[i].size(); ++k) {
      TensorSpec spec;
      Status s = TensorSpecFromJson(j[i][k], "--warmup[" + std::to_string(i) + "][" + std::to_string(k) + "]",
                                    false, &spec);
      if (!s.ok()) return s;
      entry.push_back(std::move(spec));
    }
    out->push_back(std::move(entry));
  }
  return Status::Ok();
}

std::string ModelConfig::input_name(size_t k) const {
  return k < input_names.size() ? input_names[k] : DefaultInputName(k);
}

std::string ModelConfig::output_name(size_t k) const {
  return k < output_names.size() ? output_names[k] : DefaultOutputName(k);
}

int ResolveInstanceCount(const InstanceConfig& instance, int available_cores) {
  if (!instance.count_auto) return instance.count;
  return std::clamp(available_cores / std::max(1, instance.threads), 1, kMaxWorkersPerModel);
}

}  // namespace torchfarm
