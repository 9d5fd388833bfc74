// HttpV2Handler: what one HTTP request to the /v2 paths means, and its answer.
//
// Owns: routing (GET /v2/health/live|ready, GET /v2,
// GET /v2/models/{name}[/versions/{v}][/ready|/config|/stats], GET /v2/models/stats,
// POST /v2/models/{name}[/versions/{v}]/infer, POST /v2/repository/index,
// POST /v2/repository/models/{name}/load|unload, /v2/systemsharedmemory/...; 404 unknown path, 405
// wrong method), the farm calls each route makes (kMetaTag for health and metadata, for inference
// the request's tag: its peer's, or its frontend.client_id_header's; frontend_tag.h) and the
// status and body of the answer. Knows nothing of sockets, keep-alive or
// limits (HttpSession does). Runs on the FarmChannel's thread; `done` runs there too, exactly once.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "common/config.h"
#include "common/status.h"
#include "supervisor/frontend/farm_channel.h"
#include "supervisor/frontend/request_body.h"

namespace torchfarm {

using HttpRequest = boost::beast::http::request<RequestBody>;

enum class V2Route {
  kHealthLive,
  kHealthReady,
  kServerMetadata,
  kModelMetadata,
  kModelReady,
  kModelConfig,
  kModelStats,
  kInfer,
  kRepositoryIndex,   // POST /v2/repository/index (v2_repository.h)
  kRepositoryLoad,    // POST /v2/repository/models/{name}/load
  kRepositoryUnload,  // POST /v2/repository/models/{name}/unload
  kLogging,           // GET /v2/logging (read) and POST (set): `model` holds the method
  // Triton's system shared memory (v2_system_shm.h); `model` holds the region name (empty: all).
  kSystemShmStatus,      // GET /v2/systemsharedmemory[/region/{r}]/status
  kSystemShmRegister,    // POST /v2/systemsharedmemory/region/{r}/register
  kSystemShmUnregister,  // POST /v2/systemsharedmemory[/region/{r}]/unregister
};

// A parsed request target. `http_status` is 0 when the target routes; else 404 or 405 (then
// `allow` names the method the path takes) with `error` saying why.
struct V2Target {
  V2Route route = V2Route::kHealthLive;
  std::string model;    // percent-decoded
  std::string version;  // empty: the default
  int http_status = 0;
  std::string error;
  std::string allow;
};
V2Target ParseV2Target(boost::beast::http::verb method, std::string_view target);

struct V2HttpAnswer {
  int http_status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::optional<size_t> json_bytes;  // Inference-Header-Content-Length for binary outputs
  std::string allow;                 // 405
  std::vector<std::pair<std::string, std::string>> headers;  // more response headers
  StatusCode code = StatusCode::kOk;  // for FrontendStats
  int64_t farm_us = 0;               // time the farm held the request (0: never reached it)
};

// An error answer: {"error": message} with the HTTP status of `status`'s code.
V2HttpAnswer V2ErrorAnswer(const Status& status);

// Answers `request` from `peer` ("ip:port"); takes the request's body. From `config`:
// system_shared_memory (server metadata lists the extension, and loopback clients may use it) and
// client_id_header (an inference request's header of that name names its client).
void HandleV2Request(HttpRequest& request, const std::string& peer, FarmChannel& channel,
                     std::function<void(V2HttpAnswer)> done, const FrontendConfig& config);

}  // namespace torchfarm
