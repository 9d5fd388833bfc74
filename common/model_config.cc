// The models[] entries of the farm's config (common/config.h): an entry's instance groups,
// warm-up, rollout and pipeline sections, its versions (listed, or a model_repository folder's),
// and the model settings' JSON form for the worker's command line.
#include <algorithm>
#include <cctype>
#include <filesystem>

#include "common/bytes_items.h"
#include "common/config.h"
#include "common/config_fields.h"
#include "common/model_versions.h"
#include "common/number_parse.h"
#include "common/protocol.h"
#include "common/tensor_names.h"
#include "common/worker_count.h"

namespace torchfarm {

using nlohmann::json;
using namespace config_fields;  // NOLINT(build/namespaces): the config readers

namespace {

// The worker's reading of "format" (worker/model_runner.h, ResolveModelFormat): "aoti", or "auto"
// with a path ending in ".pt2".
bool PathNamesAotiPackage(const std::string& path, const std::string& format) {
  if (format == "aoti") return true;
  const std::string suffix = ".pt2";
  return format == "auto" && path.size() >= suffix.size() &&
         path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A CPU number in "cores": Linux builds for at most 8192 CPUs (NR_CPUS).
constexpr int64_t kMaxCoreNumber = 8191;

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

// The entry's "name", "path" and "format"; a relative path is taken from `base_dir`.
Status ParseModelIdentity(const json& j, const std::string& where, const std::string& base_dir,
                          bool path_required, ModelConfig* m) {
  Status s;
  if (s = GetString(j, "name", where, true, &m->name); !s.ok()) return s;
  if (!ValidModelName(m->name)) {
    return InvalidArgument(where + ".name: expected letters, digits, '_', '-' or '.', got \"" +
                           m->name + "\"");
  }
  if (s = GetString(j, "path", where, path_required, &m->path); !s.ok()) return s;
  if (s = GetString(j, "format", where, false, &m->format); !s.ok()) return s;
  if (m->format != "auto" && m->format != "torchscript" && m->format != "aoti") {
    return InvalidArgument(where +
                           ".format: expected \"auto\", \"torchscript\" or \"aoti\", got \"" +
                           m->format + "\"");
  }
  if (s = GetString(j, "optimize", where, false, &m->optimize); !s.ok()) return s;
  if (m->optimize != "none" && m->optimize != "freeze" && m->optimize != "inference") {
    return InvalidArgument(where +
                           ".optimize: expected \"none\", \"freeze\" or \"inference\", got \"" +
                           m->optimize + "\"");
  }
  if (!m->path.empty()) {
    std::filesystem::path p(m->path);
    if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
    m->path = p.lexically_normal().string();
  }
  return Status::Ok();
}

// The entry's "inputs" (required) and "outputs" tensor lists.
Status ParseModelTensors(const json& j, const std::string& where, ModelConfig* m) {
  auto inputs = j.find("inputs");
  if (inputs == j.end()) {
    return InvalidArgument(where + ".inputs: expected a non-empty array of {\"dtype\", \"shape\"}");
  }
  // A request slot holds kMaxInputs tensors (ipc/slot_codec.h): more could never be served.
  Status s = NamedTensorListFromJson(*inputs, where + ".inputs", kMaxInputs, false, &m->inputs,
                                     &m->input_names);
  if (!s.ok()) return s;
  if (auto outputs = j.find("outputs"); outputs != j.end()) {
    // A reply holds kMaxOutputs tensors: a model returning more fails every batch.
    s = NamedTensorListFromJson(*outputs, where + ".outputs", kMaxOutputs, true, &m->outputs,
                                &m->output_names);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

// The entry's "instances" (one default group when absent) and their summed worker count.
Status ParseModelInstances(const json& j, const std::string& where, ModelConfig* m) {
  Status s;
  if (auto inst = j.find("instances"); inst != j.end()) {
    if (!inst->is_array()) return InvalidArgument(where + ".instances: expected an array");
    for (size_t i = 0; i < inst->size(); ++i) {
      InstanceConfig ic;
      s = ParseInstance((*inst)[i], where + ".instances[" + std::to_string(i) + "]", &ic);
      if (!s.ok()) return s;
      m->instances.push_back(std::move(ic));
    }
  } else {
    m->instances.push_back(InstanceConfig{});
  }
  int64_t total_count = 0;
  for (const InstanceConfig& ic : m->instances) total_count += ic.count_auto ? 0 : ic.count;
  return CheckWorkerCount(total_count, where + ".instances[].count (sum)");
}

// The entry's batching, queueing and ring settings, from "max_batch_size" to "ring_slots".
Status ParseModelQueueing(const json& j, const std::string& where, ModelConfig* m) {
  Status s;
  if (s = GetInt(j, "max_batch_size", where, 1, 1 << 20, &m->max_batch_size); !s.ok()) return s;
  if (s = GetInt(j, "max_queue_delay_us", where, 0, 60'000'000, &m->max_queue_delay_us); !s.ok())
    return s;
  if (s = GetInt(j, "max_queue_size", where, 1, 10'000'000, &m->max_queue_size); !s.ok()) return s;
  if (s = GetInt(j, "max_queue_wait_ms", where, 0, 86'400'000, &m->max_queue_wait_ms); !s.ok())
    return s;
  if (s = GetInt(j, "latency_slo_ms", where, 0, 86'400'000, &m->latency_slo_ms); !s.ok()) return s;
  if (s = GetInt(j, "max_inflight_per_worker", where, 1, 64, &m->max_inflight_per_worker); !s.ok())
    return s;
  if (s = GetInt(j, "priority_levels", where, 1, 16, &m->priority_levels); !s.ok()) return s;
  if (s = GetInt(j, "default_priority_level", where, 1, 16, &m->default_priority_level); !s.ok())
    return s;
  if (m->default_priority_level > m->priority_levels) {
    return InvalidArgument(where + ".default_priority_level: expected 1.." +
                           std::to_string(m->priority_levels) + " (priority_levels), got " +
                           std::to_string(m->default_priority_level));
  }
  if (s = GetBool(j, "fair_queueing", where, &m->fair_queueing); !s.ok()) return s;
  if (auto weights = j.find("client_weights"); weights != j.end()) {
    s = ParseClientWeights(*weights, where + ".client_weights", &m->client_weights);
    if (!s.ok()) return s;
  }
  if (s = GetInt(j, "slot_bytes", where, 4096, int64_t{1} << 34, &m->slot_bytes); !s.ok()) return s;
  if (s = GetInt(j, "hang_timeout_ms", where, 0, 86'400'000, &m->hang_timeout_ms); !s.ok())
    return s;
  m->ring_slots = std::max(4, m->max_inflight_per_worker);
  if (s = GetInt(j, "ring_slots", where, 1, 64, &m->ring_slots); !s.ok()) return s;
  if (m->ring_slots < m->max_inflight_per_worker) {
    return InvalidArgument(where + ".ring_slots: " + std::to_string(m->ring_slots) +
                           " is less than max_inflight_per_worker " +
                           std::to_string(m->max_inflight_per_worker));
  }
  return Status::Ok();
}

// The entry's "preferred_batch_sizes": integers in 1..max_batch_size, kept sorted.
Status ParsePreferredBatchSizes(const json& j, const std::string& where, ModelConfig* m) {
  if (auto pref = j.find("preferred_batch_sizes"); pref != j.end()) {
    if (!pref->is_array()) {
      return InvalidArgument(where + ".preferred_batch_sizes: expected an array of integers");
    }
    for (const auto& v : *pref) {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > m->max_batch_size) {
        return InvalidArgument(where + ".preferred_batch_sizes: expected integers in 1.." +
                               std::to_string(m->max_batch_size) + " (max_batch_size), got " +
                               Got(v));
      }
      m->preferred_batch_sizes.push_back(v.get<int64_t>());
    }
    std::sort(m->preferred_batch_sizes.begin(), m->preferred_batch_sizes.end());
  }
  return Status::Ok();
}

// Checks that no instance group has more streams than max_inflight_per_worker.
Status CheckInstanceStreams(const std::string& where, const ModelConfig& m) {
  for (size_t i = 0; i < m.instances.size(); ++i) {
    if (m.instances[i].streams > m.max_inflight_per_worker) {
      return InvalidArgument(where + ".instances[" + std::to_string(i) +
                             "].streams: " + std::to_string(m.instances[i].streams) +
                             " streams need at least as many batches in flight, but "
                             "max_inflight_per_worker is " +
                             std::to_string(m.max_inflight_per_worker) + " (raise it)");
    }
  }
  return Status::Ok();
}

// The entry's "warmup", "rollout" and "pipeline" sections (inputs checked without a pipeline).
Status ParseModelSections(const json& j, const std::string& where, const std::string& base_dir,
                          ModelConfig* m) {
  Status s;
  if (auto warmup = j.find("warmup"); warmup != j.end()) {
    if (s = ParseWarmup(*warmup, where + ".warmup", *m, &m->warmup); !s.ok()) return s;
  }
  if (auto rollout = j.find("rollout"); rollout != j.end()) {
    if (s = ParseRollout(*rollout, where + ".rollout", &m->rollout); !s.ok()) return s;
  }
  if (auto pipeline = j.find("pipeline"); pipeline != j.end()) {
    s = ParsePipelineConfig(*pipeline, where + ".pipeline", base_dir, m->inputs, !m->warmup.empty(),
                            &m->pipeline);
  } else {
    s = CheckInputsWithoutPipeline(m->inputs, where);
  }
  return s;
}

// `path_required`: false where versions bring their own paths.
Status ParseModel(const json& j, const std::string& where, const std::string& base_dir,
                  bool path_required, ModelConfig* out) {
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + Got(j));
  Status s = CheckKeys(j, where,
                       {"name",
                        "path",
                        "format",
                        "optimize",
                        "inputs",
                        "outputs",
                        "instances",
                        "max_batch_size",
                        "max_queue_delay_us",
                        "preferred_batch_sizes",
                        "max_queue_size",
                        "max_queue_wait_ms",
                        "latency_slo_ms",
                        "max_inflight_per_worker",
                        "priority_levels",
                        "default_priority_level",
                        "fair_queueing",
                        "client_weights",
                        "slot_bytes",
                        "ring_slots",
                        "hang_timeout_ms",
                        "warmup",
                        "versions",
                        "version_policy",
                        "rollout",
                        "pipeline"});
  if (!s.ok()) return s;
  ModelConfig m;
  if (s = ParseModelIdentity(j, where, base_dir, path_required, &m); !s.ok()) return s;
  if (s = ParseModelTensors(j, where, &m); !s.ok()) return s;
  if (s = ParseModelInstances(j, where, &m); !s.ok()) return s;
  if (s = ParseModelQueueing(j, where, &m); !s.ok()) return s;
  if (s = ParsePreferredBatchSizes(j, where, &m); !s.ok()) return s;
  if (s = CheckInstanceStreams(where, m); !s.ok()) return s;
  if (s = ParseModelSections(j, where, base_dir, &m); !s.ok()) return s;
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
  // "optimize" is for TorchScript: every version's file, by the worker's reading of its format.
  for (const VersionSource& source : sources) {
    if (m.optimize == "none" || !PathNamesAotiPackage(source.path, m.format)) continue;
    const std::string whose = listed || repository
                                  ? "version \"" + source.version + "\" of this entry is"
                                  : "this entry's model is";
    return InvalidArgument(where + ".optimize: \"" + m.optimize +
                           "\" applies to TorchScript models, and " + whose +
                           " an AOTInductor package (format \"" + m.format + "\", path \"" +
                           source.path + "\"), compiled already: use \"none\"");
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
Status ParseRepositoryModels(const std::string& dir, const std::string& base_dir,
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

Status ParseModelConfig(const json& j, const std::string& where, const std::string& base_dir,
                        std::vector<ModelConfig>* out) {
  out->clear();
  return ParseModelVersions(j, where, base_dir, nullptr, out);
}

Status ParseModelRepository(const std::string& dir, const std::string& base_dir,
                            std::vector<ModelConfig>* out) {
  out->clear();
  return ParseRepositoryModels(dir, base_dir, out);
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

std::vector<std::vector<TensorSpec>> OutputProbeBatches(const ModelConfig& model) {
  if (model.inputs.empty() || !model.outputs.empty() || !model.warmup.empty() ||
      model.pipeline.enabled()) {
    return {};
  }
  // A variable dim whose output dims the metadata must find: any but a batching model's dim 0
  // (LearnOutputs writes -1 there).
  bool variable = false;
  auto batch = [&](int64_t rows, int64_t size) {
    std::vector<TensorSpec> entry = model.inputs;
    for (TensorSpec& spec : entry) {
      for (size_t d = 0; d < spec.shape.size(); ++d) {
        if (spec.shape[d] >= 0) continue;
        if (d > 0 || model.max_batch_size <= 1) variable = true;
        spec.shape[d] = d == 0 ? rows : size;
      }
    }
    return entry;
  };
  std::vector<std::vector<TensorSpec>> batches{batch(1, kProbeDimSmall)};
  if (variable) batches.push_back(batch(2, kProbeDimLarge));
  return batches;
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
