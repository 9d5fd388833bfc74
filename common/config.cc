#include "common/config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/protocol.h"

namespace torchfarm {

using nlohmann::json;

namespace {

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

template <typename Int>
Status GetInt(const json& j, const std::string& key, const std::string& where, int64_t min,
              int64_t max, Int* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  if (!it->is_number_integer() || it->get<int64_t>() < min || it->get<int64_t>() > max) {
    return InvalidArgument(where + "." + key + ": expected an integer in " + std::to_string(min) +
                           ".." + std::to_string(max) + ", got " + Got(*it));
  }
  *out = static_cast<Int>(it->get<int64_t>());
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
                                 "gpu_failures_before_fallback"});
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
    } else if (s = GetInt(j, "count", where, 0, 1024, &inst.count); !s.ok()) {
      return InvalidArgument(s.message() + " or \"auto\"");
    }
  }
  if (s = GetInt(j, "threads", where, 1, 1024, &inst.threads); !s.ok()) return s;
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
  if (auto c = j.find("cores"); c != j.end()) {
    if (!c->is_array()) return InvalidArgument(where + ".cores: expected an array of core numbers");
    for (const auto& core : *c) {
      if (!core.is_number_integer() || core.get<int>() < 0) {
        return InvalidArgument(where + ".cores: expected non-negative integers, got " + Got(core));
      }
      inst.cores.push_back(core.get<int>());
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

Status ParseModel(const json& j, const std::string& where, const std::string& base_dir,
                  ModelConfig* out) {
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + Got(j));
  Status s = CheckKeys(j, where,
                       {"name", "path", "inputs", "instances", "max_batch_size",
                        "max_queue_delay_us", "preferred_batch_sizes", "max_queue_size",
                        "max_inflight_per_worker", "priority_levels", "slot_bytes", "ring_slots",
                        "hang_timeout_ms"});
  if (!s.ok()) return s;
  ModelConfig m;
  if (s = GetString(j, "name", where, true, &m.name); !s.ok()) return s;
  if (!ValidModelName(m.name)) {
    return InvalidArgument(where + ".name: expected letters, digits, '_', '-' or '.', got \"" +
                           m.name + "\"");
  }
  if (s = GetString(j, "path", where, true, &m.path); !s.ok()) return s;
  std::filesystem::path p(m.path);
  if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
  m.path = p.lexically_normal().string();

  auto inputs = j.find("inputs");
  if (inputs == j.end() || !inputs->is_array() || inputs->empty()) {
    return InvalidArgument(where + ".inputs: expected a non-empty array of {\"dtype\", \"shape\"}");
  }
  for (size_t i = 0; i < inputs->size(); ++i) {
    TensorSpec spec;
    s = TensorSpecFromJson((*inputs)[i], where + ".inputs[" + std::to_string(i) + "]", true, &spec);
    if (!s.ok()) return s;
    m.inputs.push_back(std::move(spec));
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
  if (s = GetInt(j, "max_batch_size", where, 1, 1 << 20, &m.max_batch_size); !s.ok()) return s;
  if (s = GetInt(j, "max_queue_delay_us", where, 0, 60'000'000, &m.max_queue_delay_us); !s.ok())
    return s;
  if (s = GetInt(j, "max_queue_size", where, 1, 10'000'000, &m.max_queue_size); !s.ok()) return s;
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
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace

static Status ParseRestart(const json& j, RestartConfig* out) {
  const std::string where = "config.restart";
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + Got(j));
  Status s = CheckKeys(j, where, {"initial_backoff_ms", "max_backoff_ms", "max_restarts",
                                  "window_ms", "healthy_after_ms"});
  if (!s.ok()) return s;
  RestartConfig r;
  if (s = GetInt(j, "initial_backoff_ms", where, 0, 3'600'000, &r.initial_backoff_ms); !s.ok()) return s;
  if (s = GetInt(j, "max_backoff_ms", where, 0, 3'600'000, &r.max_backoff_ms); !s.ok()) return s;
  if (s = GetInt(j, "max_restarts", where, 0, 1'000'000, &r.max_restarts); !s.ok()) return s;
  if (s = GetInt(j, "window_ms", where, 1, 86'400'000, &r.window_ms); !s.ok()) return s;
  if (s = GetInt(j, "healthy_after_ms", where, 0, 86'400'000, &r.healthy_after_ms); !s.ok()) return s;
  *out = r;
  return Status::Ok();
}

Status ParseConfig(const json& j, const std::string& base_dir, FarmConfig* out) {
  if (!j.is_object()) return InvalidArgument("config: expected a JSON object, got " + Got(j));
  Status s = CheckKeys(j, "config", {"endpoint", "admin_endpoint", "run_dir", "heartbeat_ms",
                                     "worker_binary", "models", "max_retries",
                                     "drain_timeout_ms", "restart", "metrics_endpoint"});
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
  if (s = GetInt(j, "max_retries", "config", 0, 100, &c.max_retries); !s.ok()) return s;
  if (s = GetString(j, "metrics_endpoint", "config", false, &c.metrics_endpoint); !s.ok()) return s;
  if (s = GetInt(j, "drain_timeout_ms", "config", 0, 86'400'000, &c.drain_timeout_ms); !s.ok())
    return s;
  if (auto r = j.find("restart"); r != j.end()) {
    if (s = ParseRestart(*r, &c.restart); !s.ok()) return s;
  }
  auto models = j.find("models");
  if (models == j.end() || !models->is_array() || models->empty()) {
    return InvalidArgument("config.models: expected a non-empty array of models");
  }
  std::set<std::string> names;
  for (size_t i = 0; i < models->size(); ++i) {
    ModelConfig m;
    s = ParseModel((*models)[i], "config.models[" + std::to_string(i) + "]", base_dir, &m);
    if (!s.ok()) return s;
    if (!names.insert(m.name).second) {
      return InvalidArgument("config.models[" + std::to_string(i) + "].name: model \"" + m.name +
                             "\" is declared twice");
    }
    c.models.push_back(std::move(m));
  }
  *out = std::move(c);
  return Status::Ok();
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

int ResolveInstanceCount(const InstanceConfig& instance, int available_cores) {
  if (!instance.count_auto) return instance.count;
  return std::max(1, available_cores / std::max(1, instance.threads));
}

}  // namespace torchfarm
