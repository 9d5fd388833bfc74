#include "supervisor/frontend/v2_shm_parameters.h"

#include <tuple>
#include <utility>

#include "common/protocol.h"

namespace torchfarm {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxShmParameter = uint64_t{1} << 62;
constexpr const char* kShmRegionKey = "shared_memory_region";
constexpr const char* kShmOffsetKey = "shared_memory_offset";
constexpr const char* kShmByteSizeKey = "shared_memory_byte_size";

std::string ShmGot(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 64) + "...";
  return std::string(value.type_name()) + " " + text;
}

Status ShmUnsignedParameter(const json& params, const char* key, const std::string& where,
                            uint64_t min, uint64_t* out) {
  auto it = params.find(key);
  const std::string at = where + ".parameters." + key;
  if (it == params.end()) {
    return InvalidArgument(at + ": expected an integer " + std::to_string(min) + "..2^62 with " +
                           kShmRegionKey + ", got nothing");
  }
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0)) {
    return InvalidArgument(at + ": expected an integer " + std::to_string(min) + "..2^62, got " +
                           ShmGot(*it));
  }
  const uint64_t value = it->get<uint64_t>();
  if (value < min || value > kMaxShmParameter) {
    return InvalidArgument(at + ": expected an integer " + std::to_string(min) + "..2^62, got " +
                           std::to_string(value));
  }
  *out = value;
  return Status::Ok();
}

}  // namespace

Status ParseV2ShmParameters(const json& params, const std::string& where, V2ShmPlace* out) {
  *out = V2ShmPlace{};
  if (!params.is_object()) return Status::Ok();
  auto region = params.find(kShmRegionKey);
  if (region == params.end()) {
    for (const char* key : {kShmOffsetKey, kShmByteSizeKey}) {
      if (params.contains(key)) {
        return InvalidArgument(where + ".parameters." + key + ": given without " + kShmRegionKey +
                               "; expected all of " + kShmRegionKey + ", " + kShmByteSizeKey +
                               " and optionally " + kShmOffsetKey);
      }
    }
    return Status::Ok();
  }
  if (!region->is_string() || region->get<std::string>().empty()) {
    return InvalidArgument(where + ".parameters." + kShmRegionKey +
                           ": expected the name of a registered region, got " + ShmGot(*region));
  }
  V2ShmPlace place;
  place.region = region->get<std::string>();
  if (Status s = ShmUnsignedParameter(params, kShmByteSizeKey, where, 1, &place.byte_size);
      !s.ok()) {
    return s;
  }
  if (params.contains(kShmOffsetKey)) {
    if (Status s = ShmUnsignedParameter(params, kShmOffsetKey, where, 0, &place.offset); !s.ok())
      return s;
  }
  *out = std::move(place);
  return Status::Ok();
}

bool IsLoopbackPeer(std::string_view peer) {
  for (std::string_view prefix : {"ipv4:", "ipv6:"}) {
    if (peer.substr(0, prefix.size()) == prefix) peer.remove_prefix(prefix.size());
  }
  if (peer.substr(0, 5) == "unix:") return true;
  std::string_view host;
  if (!peer.empty() && peer[0] == '[') {
    const size_t close = peer.find(']');
    if (close == std::string_view::npos) return false;
    host = peer.substr(1, close - 1);
  } else {
    const size_t colon = peer.rfind(':');
    host = colon == std::string_view::npos ? peer : peer.substr(0, colon);
  }
  // Percent-encoded zone ids and IPv4-mapped IPv6 addresses: gRPC writes [::ffff:127.0.0.1].
  if (host.substr(0, 7) == "::ffff:") host.remove_prefix(7);
  return host == "::1" || (host.substr(0, 4) == "127." && host.find(':') == std::string_view::npos);
}

Status SystemShmAllowed(bool enabled, const std::string& peer, StatusCode code) {
  if (!enabled) {
    return Status(code,
                  "system shared memory is off on this farm: set \"frontend\": "
                  "{\"system_shared_memory\": true} in its config to let loopback clients "
                  "register regions (docs/kserve-v2.md)");
  }
  if (!IsLoopbackPeer(peer)) {
    return Status(code,
                  "system shared memory is served to clients on this host only (loopback "
                  "127.0.0.0/8, ::1, or a unix socket); this client is " +
                      peer.substr(0, 100));
  }
  return Status::Ok();
}

Status CheckV2ShmAllowed(const V2InferRequest& request, bool enabled, const std::string& peer) {
  if (!UsesSystemShm(request)) return Status::Ok();
  Status s = SystemShmAllowed(enabled, peer, StatusCode::kInvalidArgument);
  if (s.ok()) return s;
  return InvalidArgument("parameters." + std::string(kShmRegionKey) + ": " + s.message());
}

Status ParseSystemShmRegisterBody(std::string_view body, std::string* key, uint64_t* offset,
                                  uint64_t* byte_size) {
  const std::string expected =
      "expected a JSON object {\"key\": \"/name\", \"offset\": N, \"byte_size\": N}";
  if (body.size() > (64 << 10) || !JsonNestingWithin(body, 4)) {
    return InvalidArgument("register body: " + expected + ", got " + std::to_string(body.size()) +
                           " bytes");
  }
  json j = json::parse(body, nullptr, false);
  if (!j.is_object()) {
    return InvalidArgument("register body: " + expected + ", got " +
                           (j.is_discarded() ? std::string("invalid JSON") : ShmGot(j)));
  }
  auto k = j.find("key");
  if (k == j.end() || !k->is_string()) {
    return InvalidArgument("register body: \"key\": expected a string \"/name\", got " +
                           (k == j.end() ? std::string("nothing") : ShmGot(*k)));
  }
  *key = k->get<std::string>();
  *offset = 0;
  for (const auto& [name, min, out] :
       {std::tuple<const char*, uint64_t, uint64_t*>{"offset", 0, offset},
        std::tuple<const char*, uint64_t, uint64_t*>{"byte_size", 1, byte_size}}) {
    auto it = j.find(name);
    if (it == j.end() && std::string(name) == "offset") continue;
    if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<uint64_t>() < min || it->get<uint64_t>() > kMaxShmParameter) {
      return InvalidArgument("register body: \"" + std::string(name) + "\": expected an integer " +
                             std::to_string(min) + "..2^62, got " +
                             (it == j.end() ? std::string("nothing") : ShmGot(*it)));
    }
    *out = it->get<uint64_t>();
  }
  return Status::Ok();
}

}  // namespace torchfarm
