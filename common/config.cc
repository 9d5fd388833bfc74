// The farm-level sections of the config (common/config.h); the models[] entries are read in
// common/model_config.cc.
#include "common/config.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "common/bytes_items.h"
#include "common/config_fields.h"
#include "common/number_parse.h"
#include "common/protocol.h"
#include "common/worker_count.h"

namespace torchfarm {

using nlohmann::json;
using namespace config_fields;  // NOLINT(build/namespaces): the config readers

namespace {

// "limits.max_shm_bytes": one 4 MiB worker segment at least, 1 PiB at most.
constexpr int64_t kMinShmBytes = int64_t{1} << 20;
constexpr int64_t kMaxShmBytes = int64_t{1} << 50;

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

// RFC 9110's tchar: what an HTTP field name is made of.
static bool IsHeaderNameChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// "frontend.client_id_header": "" (off) or a header name, lowercased here so gRPC (whose metadata
// keys are lowercase) looks it up as it arrives and HTTP (case-insensitive) finds it either way.
static Status ParseClientIdHeader(const json& j, const std::string& where, std::string* out) {
  auto it = j.find("client_id_header");
  if (it == j.end()) return Status::Ok();
  const std::string key = where + ".client_id_header";
  if (!it->is_string()) {
    return InvalidArgument(
        key + ": expected a string (an HTTP header name, or \"\" for off), got " + Got(*it));
  }
  const std::string& name = it->get_ref<const std::string&>();
  const bool valid = name.size() <= kMaxClientIdHeaderChars &&
                     std::all_of(name.begin(), name.end(), IsHeaderNameChar);
  if (!valid) {
    return InvalidArgument(
        key + ": expected an HTTP header name (letters, digits, -_.!#$%&'*+^`|~, 1.." +
        std::to_string(kMaxClientIdHeaderChars) + " characters) or \"\" for off, got " + Got(*it));
  }
  out->resize(name.size());
  std::transform(name.begin(), name.end(), out->begin(), [](char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  });
  return Status::Ok();
}

static Status ParseFrontend(const json& j, const std::string& base_dir, FrontendConfig* out) {
  const std::string where = "config.frontend";
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + Got(j));
  Status s = CheckKeys(
      j, where,
      {"threads", "max_connections", "idle_timeout_ms", "request_timeout_ms", "max_header_bytes",
       "max_body_bytes", "max_inflight_body_bytes", "tls", "dashboard", "model_control",
       "log_control", "system_shared_memory", "client_id_header"});
  if (!s.ok()) return s;
  FrontendConfig f;
  if (s = GetBool(j, "model_control", where, &f.model_control); !s.ok()) return s;
  if (s = GetBool(j, "log_control", where, &f.log_control); !s.ok()) return s;
  if (s = GetBool(j, "system_shared_memory", where, &f.system_shared_memory); !s.ok()) return s;
  if (s = ParseClientIdHeader(j, where, &f.client_id_header); !s.ok()) return s;
  if (s = GetInt(j, "threads", where, 1, 64, &f.threads); !s.ok()) return s;
  if (s = GetBool(j, "dashboard", where, &f.dashboard); !s.ok()) return s;
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
                                     "max_unread_replies_per_client",
                                     "max_unread_reply_bytes_per_client", "max_shm_bytes",
                                     "max_item_bytes"});
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
    if (s = GetInt(*j, "max_unread_replies_per_client", where, 1, 1'000'000,
                   &l.max_unread_replies_per_client);
        !s.ok())
      return s;
    if (s = GetInt(*j, "max_unread_reply_bytes_per_client", where, 1 << 20, int64_t{1} << 40,
                   &l.max_unread_reply_bytes_per_client);
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

namespace {

// "endpoint", "run_dir" (from `base_dir` when relative) and "admin_endpoint" (default in run_dir).
Status ParseEndpoints(const json& j, const std::string& base_dir, FarmConfig* c) {
  Status s;
  if (s = GetString(j, "endpoint", "config", false, &c->endpoint); !s.ok()) return s;
  if (s = GetString(j, "run_dir", "config", false, &c->run_dir); !s.ok()) return s;
  if (std::filesystem::path(c->run_dir).is_relative()) {
    c->run_dir = (std::filesystem::path(base_dir) / c->run_dir).lexically_normal().string();
  }
  c->admin_endpoint = "ipc://" + c->run_dir + "/admin.sock";
  if (s = GetString(j, "admin_endpoint", "config", false, &c->admin_endpoint); !s.ok()) return s;
  if (c->admin_endpoint == c->endpoint) {
    return InvalidArgument("config.admin_endpoint: must differ from endpoint \"" + c->endpoint +
                           "\"");
  }
  return Status::Ok();
}

// The farm's scalar settings, from "heartbeat_ms" to "drain_timeout_ms".
Status ParseFarmSettings(const json& j, FarmConfig* c) {
  Status s;
  if (s = GetInt(j, "heartbeat_ms", "config", 10, 600'000, &c->heartbeat_ms); !s.ok()) return s;
  if (s = GetString(j, "worker_binary", "config", false, &c->worker_binary); !s.ok()) return s;
  if (s = GetString(j, "worker_launch", "config", false, &c->worker_launch); !s.ok()) return s;
  if (c->worker_launch != "zygote" && c->worker_launch != "exec") {
    return InvalidArgument("config.worker_launch: expected \"zygote\" or \"exec\", got \"" +
                           c->worker_launch + "\"");
  }
  if (s = GetInt(j, "model_repository_poll_s", "config", 0, 86'400, &c->model_repository_poll_s);
      !s.ok())
    return s;
  if (s = GetInt(j, "max_retries", "config", 0, 100, &c->max_retries); !s.ok()) return s;
  if (s = GetInt(j, "max_connections", "config", 1, kMaxJobConnections, &c->max_connections);
      !s.ok())
    return s;
  if (s = GetString(j, "metrics_endpoint", "config", false, &c->metrics_endpoint); !s.ok())
    return s;
  if (s = GetInt(j, "drain_timeout_ms", "config", 0, kMaxDrainTimeoutMs, &c->drain_timeout_ms);
      !s.ok())
    return s;
  return Status::Ok();
}

// The optional "restart", "curve", "gpu" and "client_shm" sections.
Status ParseFarmSections(const json& j, const std::string& base_dir, FarmConfig* c) {
  Status s;
  if (auto r = j.find("restart"); r != j.end()) {
    if (s = ParseRestart(*r, &c->restart); !s.ok()) return s;
  }
  if (auto curve = j.find("curve"); curve != j.end()) {
    if (s = ParseCurve(*curve, base_dir, &c->curve); !s.ok()) return s;
  }
  if (auto gpu = j.find("gpu"); gpu != j.end()) {
    if (s = ParseGpu(*gpu, &c->gpu); !s.ok()) return s;
  }
  if (auto shm = j.find("client_shm"); shm != j.end()) {
    if (s = ParseClientShm(*shm, &c->client_shm); !s.ok()) return s;
  }
  return Status::Ok();
}

// "insecure" and "ipc_group", then the job and admin endpoints' security (CheckEndpointSecurity).
Status ParseSecurity(const json& j, FarmConfig* c) {
  Status s;
  if (s = GetBool(j, "insecure", "config", &c->insecure); !s.ok()) return s;
  if (s = GetString(j, "ipc_group", "config", false, &c->ipc_group); !s.ok()) return s;
  if (!c->ipc_group.empty() && c->endpoint.rfind("ipc://", 0) != 0) {
    return InvalidArgument("config.ipc_group: applies to an ipc:// endpoint only, endpoint is \"" +
                           c->endpoint + "\"");
  }
  return CheckEndpointSecurity(*c);
}

// The optional "frontend" section, then "http_endpoint" and "grpc_endpoint" (distinct unless :0).
Status ParseFrontendAndEndpoints(const json& j, const std::string& base_dir, FarmConfig* c) {
  Status s;
  if (auto frontend = j.find("frontend"); frontend != j.end()) {
    if (s = ParseFrontend(*frontend, base_dir, &c->frontend); !s.ok()) return s;
  }
  if (s = ParseFrontendEndpoint(j, "http_endpoint", *c, &c->frontend.http_endpoint); !s.ok())
    return s;
  if (s = ParseFrontendEndpoint(j, "grpc_endpoint", *c, &c->frontend.grpc_endpoint); !s.ok())
    return s;
  if (!c->frontend.http_endpoint.empty() &&
      c->frontend.http_endpoint == c->frontend.grpc_endpoint &&
      c->frontend.http_endpoint.substr(c->frontend.http_endpoint.rfind(':')) != ":0") {
    return InvalidArgument("config.grpc_endpoint: must differ from http_endpoint \"" +
                           c->frontend.http_endpoint + "\"");
  }
  return Status::Ok();
}

// "model_repository": from `base_dir` when relative, normalized, without a trailing '/'.
Status ParseModelRepositoryPath(const json& j, const std::string& base_dir, FarmConfig* c) {
  Status s = GetString(j, "model_repository", "config", false, &c->model_repository);
  if (!s.ok()) return s;
  if (!c->model_repository.empty()) {
    std::filesystem::path p(c->model_repository);
    if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
    c->model_repository = p.lexically_normal().string();
    if (!c->model_repository.empty() && c->model_repository.back() == '/')
      c->model_repository.pop_back();
  }
  return Status::Ok();
}

// The "models" array (required without a model_repository); each entry's name into `names`.
Status ParseListedModels(const json& j, const std::string& base_dir, std::set<std::string>* names,
                         FarmConfig* c) {
  auto models = j.find("models");
  const bool need_models = c->model_repository.empty();
  if ((models == j.end() && need_models) ||
      (models != j.end() && (!models->is_array() || (models->empty() && need_models)))) {
    return InvalidArgument(
        "config.models: expected a non-empty array of models (or a "
        "\"model_repository\")");
  }
  const size_t listed = models == j.end() ? 0 : models->size();
  for (size_t i = 0; i < listed; ++i) {
    const std::string where = "config.models[" + std::to_string(i) + "]";
    std::vector<ModelConfig> versions;
    Status s = ParseModelConfig((*models)[i], where, base_dir, &versions);
    if (!s.ok()) return s;
    if (!names->insert(versions.front().name).second) {
      return InvalidArgument(where + ".name: model \"" + versions.front().name +
                             "\" is declared twice (list its versions in one entry's "
                             "\"versions\")");
    }
    for (ModelConfig& m : versions) c->models.push_back(std::move(m));
  }
  return Status::Ok();
}

// The model_repository's models, none of them also in `names` (config.models); some model at all.
Status AddRepositoryModels(const std::string& base_dir, const std::set<std::string>& names,
                           FarmConfig* c) {
  if (!c->model_repository.empty()) {
    std::vector<ModelConfig> found;
    if (Status s = ParseModelRepository(c->model_repository, base_dir, &found); !s.ok()) return s;
    for (ModelConfig& m : found) {
      if (names.count(m.name)) {
        return InvalidArgument("config.model_repository: model \"" + m.name +
                               "\" is also declared in config.models");
      }
      c->models.push_back(std::move(m));
    }
    if (c->models.empty()) {
      return InvalidArgument("config.model_repository: '" + c->model_repository +
                             "' holds no model and config.models lists none");
    }
  }
  return Status::Ok();
}

}  // namespace

Status ParseConfig(const json& j, const std::string& base_dir, FarmConfig* out) {
  if (!j.is_object()) return InvalidArgument("config: expected a JSON object, got " + Got(j));
  // The keys as a table:
  // clang-format off
  Status s = CheckKeys(
      j, "config",
      {"endpoint", "admin_endpoint", "run_dir",          "heartbeat_ms", "worker_binary",
       "models",   "max_retries",    "drain_timeout_ms", "restart",      "metrics_endpoint",
       "curve",    "insecure",       "ipc_group",        "limits",       "client_shm",
       "gpu",      "http_endpoint",  "grpc_endpoint",    "frontend",     "model_repository",
       "model_repository_poll_s", "worker_launch", "max_connections"});
  // clang-format on
  if (!s.ok()) return s;
  FarmConfig c;
  if (s = ParseEndpoints(j, base_dir, &c); !s.ok()) return s;
  if (s = ParseFarmSettings(j, &c); !s.ok()) return s;
  if (s = ParseFarmSections(j, base_dir, &c); !s.ok()) return s;
  if (s = ParseSecurity(j, &c); !s.ok()) return s;
  if (s = ParseFrontendAndEndpoints(j, base_dir, &c); !s.ok()) return s;
  if (s = ParseModelRepositoryPath(j, base_dir, &c); !s.ok()) return s;
  std::set<std::string> names;
  if (s = ParseListedModels(j, base_dir, &names, &c); !s.ok()) return s;
  if (s = AddRepositoryModels(base_dir, names, &c); !s.ok()) return s;
  auto limits = j.find("limits");
  if (s = ParseLimits(limits == j.end() ? nullptr : &*limits, c.models, &c.limits); !s.ok())
    return s;
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

}  // namespace torchfarm
