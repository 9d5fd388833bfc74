#include "supervisor/frontend/v2_system_shm.h"

#include <utility>

#include "common/protocol.h"
#include "supervisor/frontend/frontend_endpoint.h"

namespace torchfarm {

using nlohmann::json;

namespace {

constexpr const char* kSystemShmQueryKey =
    "system_shared_memory";  // supervisor/intake/system_shm_api.h

Status SystemShmMetaStatus(const FarmReply& reply) {
  const json& raw = reply.header.raw;
  if (raw.is_object() && raw.value("status", "") == "ok") return Status::Ok();
  return reply.status.ok() ? Internal("the farm's system shared memory answer was malformed")
                           : reply.status;
}

}  // namespace

void SystemShmCall(FarmChannel& channel, json query, std::function<void(Status, json)> done) {
  channel.Call(kMetaTag, std::move(query), {}, [done = std::move(done)](FarmReply reply) {
    const Status s = SystemShmMetaStatus(reply);
    done(s, s.ok() ? reply.header.raw : json::object());
  });
}

void HandleSystemShmHttp(const V2Target& target, const std::string& body, const std::string& peer,
                         bool enabled, FarmChannel& channel,
                         std::function<void(V2HttpAnswer)> done) {
  if (Status s = SystemShmAllowed(enabled, peer, StatusCode::kUnavailable); !s.ok()) {
    return done(V2ErrorAnswer(s));
  }
  json query = json::object();
  if (!target.model.empty()) query["name"] = target.model;
  if (target.route == V2Route::kSystemShmStatus) {
    query[kSystemShmQueryKey] = "status";
  } else if (target.route == V2Route::kSystemShmUnregister) {
    query[kSystemShmQueryKey] = "unregister";
  } else {
    std::string key;
    uint64_t offset = 0;
    uint64_t byte_size = 0;
    if (Status s = ParseSystemShmRegisterBody(body, &key, &offset, &byte_size); !s.ok()) {
      return done(V2ErrorAnswer(s));
    }
    query[kSystemShmQueryKey] = "register";
    query["key"] = key;
    query["offset"] = offset;
    query["byte_size"] = byte_size;
  }
  const bool status = target.route == V2Route::kSystemShmStatus;
  SystemShmCall(channel, std::move(query), [status, done = std::move(done)](Status s, json answer) {
    if (!s.ok()) return done(V2ErrorAnswer(s));
    V2HttpAnswer reply;
    // Triton's status body is the array of regions; register and unregister answer nothing.
    reply.body = status ? answer.value("regions", json::array())
                              .dump(-1, ' ', false, json::error_handler_t::replace)
                        : "{}";
    done(std::move(reply));
  });
}

}  // namespace torchfarm
