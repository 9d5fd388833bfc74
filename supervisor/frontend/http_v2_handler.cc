// The /v2 routes (http_v2_handler.h). Health and metadata ask the loop with kMetaTag; GET /v2 is
// answered here (it says nothing about the farm's state). Inference goes through v2_inference.
#include "supervisor/frontend/http_v2_handler.h"

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "supervisor/frontend/triton_model_config.h"
#include "supervisor/frontend/triton_model_stats.h"
#include "supervisor/frontend/v2_client_id.h"
#include "supervisor/frontend/v2_http_codec.h"
#include "supervisor/frontend/v2_inference.h"
#include "supervisor/frontend/v2_repository.h"
#include "supervisor/frontend/v2_system_shm.h"

namespace torchfarm {
namespace {

namespace http = boost::beast::http;
using nlohmann::json;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Path segments, percent-decoded; false on a broken escape.
bool SplitPath(std::string_view path, std::vector<std::string>* segments) {
  if (path.empty() || path[0] != '/') return false;
  path.remove_prefix(1);
  if (!path.empty() && path.back() == '/') path.remove_suffix(1);
  std::string current;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      segments->push_back(std::move(current));
      current.clear();
    } else if (path[i] == '%') {
      if (i + 2 >= path.size()) return false;
      const int high = HexValue(path[i + 1]);
      const int low = HexValue(path[i + 2]);
      if (high < 0 || low < 0) return false;
      current.push_back(static_cast<char>(high * 16 + low));
      i += 2;
    } else {
      current.push_back(path[i]);
    }
  }
  return true;
}

V2Target Routed(V2Route route, http::verb method, http::verb wanted, std::string model = {},
                std::string version = {}) {
  V2Target target;
  target.route = route;
  target.model = std::move(model);
  target.version = std::move(version);
  if (method != wanted) {
    target.http_status = 405;
    target.allow = std::string(http::to_string(wanted));
    target.error = "this path takes " + target.allow + ", got " +
                   std::string(http::to_string(method));
  }
  return target;
}

int64_t MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               start).count();
}

V2HttpAnswer JsonAnswer(int http_status, const json& body) {
  V2HttpAnswer answer;
  answer.http_status = http_status;
  answer.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  answer.code = http_status == 200 ? StatusCode::kOk : StatusCode::kUnavailable;
  return answer;
}

V2HttpAnswer AnswerMeta(const V2Target& target, const json& meta) {
  const bool ready = meta.value("ready", false);
  switch (target.route) {
    case V2Route::kHealthLive: return JsonAnswer(200, {{"live", true}});
    case V2Route::kHealthReady:
      return JsonAnswer(ready ? 200 : 503,
                        {{"ready", ready}, {"draining", meta.value("draining", false)}});
    default: break;
  }
  if (target.route == V2Route::kModelStats) {
    json stats;
    if (Status s = TritonModelStatsJson(meta, target.model, target.version, &stats); !s.ok()) {
      return V2ErrorAnswer(s);
    }
    return JsonAnswer(200, stats);
  }
  const json* model = nullptr;
  if (Status s = FindModelVersionInMeta(meta, target.model, target.version, &model); !s.ok()) {
    return V2ErrorAnswer(s);
  }
  if (target.route == V2Route::kModelConfig) {
    V2HttpAnswer answer;
    answer.body =
        TritonModelConfigJson(*model).dump(-1, ' ', false, json::error_handler_t::replace);
    return answer;
  }
  if (target.route == V2Route::kModelReady) {
    const bool model_ready = model->value("ready", false);
    return JsonAnswer(model_ready ? 200 : 503, {{"name", target.model}, {"ready", model_ready}});
  }
  V2HttpAnswer answer;
  answer.body = V2ModelMetadataBody(*model);
  return answer;
}

void HandleMeta(const V2Target& target, FarmChannel& channel,
                std::function<void(V2HttpAnswer)> done) {
  json header = json::object();
  if (!target.model.empty()) header["model"] = target.model;
  if (target.route == V2Route::kModelStats) header["statistics"] = true;
  const auto start = std::chrono::steady_clock::now();
  channel.Call(kMetaTag, std::move(header), {},
               [target, start, done = std::move(done)](FarmReply reply) {
                 // A meta reply has no "outputs", which ParseReplyHeader wants of an "ok"
                 // reply: its raw header decides.
                 const json& raw = reply.header.raw;
                 const bool ok = reply.status.ok() ||
                                 (raw.is_object() && raw.value("status", "") == "ok");
                 V2HttpAnswer answer = ok ? AnswerMeta(target, raw) : V2ErrorAnswer(reply.status);
                 answer.farm_us = MicrosSince(start);
                 done(std::move(answer));
               });
}

// The request's tag (frontend_tag.h): named by its `client_id_header`, if the config sets one and
// the request carries it; else its peer's.
Status RequestTag(const HttpRequest& request, const std::string& peer,
                  const std::string& client_id_header, std::string* tag) {
  std::vector<std::string_view> values;
  if (!client_id_header.empty()) {
    for (auto [field, end] = request.equal_range(client_id_header); field != end; ++field) {
      values.emplace_back(field->value().data(), field->value().size());
    }
  }
  return V2RequestTag(RequestOrigin::kHttp, peer, client_id_header, values, tag);
}

void HandleInfer(const V2Target& target, HttpRequest& http_request, const std::string& peer,
                 FarmChannel& channel, std::function<void(V2HttpAnswer)> done,
                 const FrontendConfig& config) {
  std::string tag;
  if (Status s = RequestTag(http_request, peer, config.client_id_header, &tag); !s.ok()) {
    return done(V2ErrorAnswer(s));
  }
  const bool system_shared_memory = config.system_shared_memory;
  auto body = std::make_shared<const std::string>(std::move(http_request.body()));
  size_t json_bytes = body->size();
  auto length = http_request.find(kInferenceHeaderContentLength);
  if (length != http_request.end()) {
    Status s = ParseInferenceHeaderLength(std::string_view(length->value().data(), length->value().size()), body->size(), &json_bytes);
    if (!s.ok()) return done(V2ErrorAnswer(s));
  }
  auto request = std::make_shared<V2InferRequest>();
  request->model = target.model;
  request->version = target.version;
  Status s = ParseV2InferRequest(std::move(body), json_bytes, request.get());
  if (s.ok()) s = CheckV2ShmAllowed(*request, system_shared_memory, peer);
  RequestHeader header;
  std::vector<zmq::message_t> frames;
  if (s.ok()) s = ToRequestHeader(*request, channel.request_limits(), &header, &frames);
  if (!s.ok()) return done(V2ErrorAnswer(s));
  const auto start = std::chrono::steady_clock::now();
  channel.Call(tag, std::move(header), std::move(frames),
               [request, start, done = std::move(done)](FarmReply reply) {
                 const int64_t farm_us = MicrosSince(start);
                 V2InferResponse response;
                 Status s = reply.status;
                 if (s.ok())
                   s = FromFarmReply(*request, reply.header, std::move(reply.frames), &response);
                 V2HttpAnswer answer;
                 if (s.ok()) {
                   V2HttpBody body = WriteV2InferResponse(response);
                   answer.body = std::move(body.bytes);
                   answer.json_bytes = body.json_bytes;
                   if (answer.json_bytes) answer.content_type = "application/octet-stream";
                 } else {
                   answer = V2ErrorAnswer(s);
                 }
                 answer.farm_us = farm_us;
                 done(std::move(answer));
               });
}

}  // namespace

V2Target ParseV2Target(http::verb method, std::string_view target) {
  using namespace std::string_view_literals;
  const std::string_view path = target.substr(0, target.find('?'));
  std::vector<std::string> seg;
  seg.reserve(8);  // the longest route has 6 segments
  // Worded only when it is the answer: every request would otherwise build it.
  const auto not_found_error = [path] {
    V2Target not_found;
    not_found.http_status = 404;
    not_found.error = "no such path: '" + std::string(path.substr(0, 200)) +
                      "'; expected /v2, /v2/health/live, /v2/health/ready, /v2/models/{name}"
                      "[/versions/{v}][/ready|/config|/stats|/infer], /v2/models/stats, "
                      "/v2/repository/index, /v2/repository/models/{name}/load|unload, "
                      "/v2/logging, /v2/systemsharedmemory[/region/{name}]/status|register|"
                      "unregister";
    return not_found;
  };
  if (!SplitPath(path, &seg) || seg.empty() || seg[0] != "v2"sv) return not_found_error();
  const http::verb get = http::verb::get;
  if (seg.size() >= 3 && seg[1] == "systemsharedmemory"sv) {
    std::string region;
    size_t action = 2;
    if (seg.size() == 5 && seg[2] == "region"sv && !seg[3].empty()) {
      region = seg[3];
      action = 4;
    } else if (seg.size() != 3) {
      return not_found_error();
    }
    if (seg[action] == "status"sv) {
      return Routed(V2Route::kSystemShmStatus, method, get, std::move(region));
    }
    if (seg[action] == "unregister"sv) {
      return Routed(V2Route::kSystemShmUnregister, method, http::verb::post, std::move(region));
    }
    if (seg[action] == "register"sv && action == 4) {
      return Routed(V2Route::kSystemShmRegister, method, http::verb::post, std::move(region));
    }
    return not_found_error();
  }
  if (seg.size() == 1) return Routed(V2Route::kServerMetadata, method, get);
  if (seg.size() == 3 && seg[1] == "health"sv && seg[2] == "live"sv) {
    return Routed(V2Route::kHealthLive, method, get);
  }
  if (seg.size() == 3 && seg[1] == "health"sv && seg[2] == "ready"sv) {
    return Routed(V2Route::kHealthReady, method, get);
  }
  const http::verb post = http::verb::post;
  if (seg.size() == 2 && seg[1] == "logging"sv) {
    V2Target logging = Routed(V2Route::kLogging, method, method == post ? post : get,
                              method == post ? "POST" : "GET");
    if (logging.http_status == 405) logging.allow = "GET, POST";
    return logging;
  }
  if (seg.size() == 3 && seg[1] == "repository"sv && seg[2] == "index"sv) {
    return Routed(V2Route::kRepositoryIndex, method, post);
  }
  if (seg.size() == 5 && seg[1] == "repository"sv && seg[2] == "models"sv &&
      (seg[4] == "load"sv || seg[4] == "unload"sv)) {
    return Routed(seg[4] == "load"sv ? V2Route::kRepositoryLoad : V2Route::kRepositoryUnload,
                  method, post, seg[3]);
  }
  if (seg.size() < 3 || seg[1] != "models"sv || seg[2].empty()) return not_found_error();
  // As Triton: every model's statistics (a model named "stats" is reached with /versions/).
  if (seg.size() == 3 && seg[2] == "stats"sv) return Routed(V2Route::kModelStats, method, get);
  std::string model = std::move(seg[2]);
  std::string version;
  size_t next = 3;
  if (seg.size() >= 5 && seg[3] == "versions"sv && !seg[4].empty()) {
    version = std::move(seg[4]);
    next = 5;
  }
  if (seg.size() == next) {
    return Routed(V2Route::kModelMetadata, method, get, std::move(model), std::move(version));
  }
  if (seg.size() == next + 1 && seg[next] == "ready"sv) {
    return Routed(V2Route::kModelReady, method, get, std::move(model), std::move(version));
  }
  if (seg.size() == next + 1 && seg[next] == "stats"sv) {
    return Routed(V2Route::kModelStats, method, get, std::move(model), std::move(version));
  }
  if (seg.size() == next + 1 && seg[next] == "config"sv) {
    return Routed(V2Route::kModelConfig, method, get, std::move(model), std::move(version));
  }
  if (seg.size() == next + 1 && seg[next] == "infer"sv) {
    return Routed(V2Route::kInfer, method, http::verb::post, std::move(model), std::move(version));
  }
  return not_found_error();
}

V2HttpAnswer V2ErrorAnswer(const Status& status) {
  V2HttpAnswer answer;
  answer.http_status = HttpStatusOf(status.code());
  answer.body = V2ErrorBody(status.message());
  answer.code = status.code();
  return answer;
}

void HandleV2Request(HttpRequest& request, const std::string& peer, FarmChannel& channel,
                     std::function<void(V2HttpAnswer)> done, const FrontendConfig& config) {
  const bool system_shared_memory = config.system_shared_memory;
  const auto path = request.target();
  V2Target target = ParseV2Target(request.method(), std::string_view(path.data(), path.size()));
  if (target.http_status != 0) {
    V2HttpAnswer answer = V2ErrorAnswer(target.http_status == 404 ? NotFound(target.error)
                                                                  : InvalidArgument(target.error));
    answer.http_status = target.http_status;
    answer.allow = target.allow;
    return done(std::move(answer));
  }
  switch (target.route) {
    case V2Route::kServerMetadata: {
      V2HttpAnswer answer;
      answer.body = V2ServerMetadataBody(system_shared_memory);
      return done(std::move(answer));
    }
    case V2Route::kInfer:
      return HandleInfer(target, request, peer, channel, std::move(done), config);
    case V2Route::kSystemShmStatus:
    case V2Route::kSystemShmRegister:
    case V2Route::kSystemShmUnregister:
      return HandleSystemShmHttp(target, request.body(), peer, system_shared_memory, channel,
                                 std::move(done));
    case V2Route::kRepositoryIndex:
    case V2Route::kRepositoryLoad:
    case V2Route::kRepositoryUnload:
    case V2Route::kLogging:
      return HandleRepositoryHttp(target, request.body(), channel, std::move(done));
    default: return HandleMeta(target, channel, std::move(done));
  }
}

}  // namespace torchfarm
