#include "supervisor/intake/system_shm_api.h"

#include <string>
#include <vector>

namespace torchfarm {

using nlohmann::json;

namespace {

json SystemShmError(const Status& status) {
  return {{"status", "error"},
          {"code", std::string(StatusCodeName(status.code()))},
          {"message", status.message()}};
}

// query[key] as a string ("" when absent); false when present and not a string.
bool QueryString(const json& query, const char* key, std::string* out) {
  out->clear();
  auto it = query.find(key);
  if (it == query.end()) return true;
  if (!it->is_string()) return false;
  *out = it->get<std::string>();
  return true;
}

bool QueryUnsigned(const json& query, const char* key, uint64_t* out) {
  auto it = query.find(key);
  if (it == query.end() || !it->is_number_integer()) return false;
  if (!it->is_number_unsigned() && it->get<int64_t>() < 0) return false;
  *out = it->get<uint64_t>();
  return true;
}

}  // namespace

json SystemShmAnswer(ClientShmRegistry* registry, bool enabled, const json& query) {
  if (!registry || !enabled) {
    return SystemShmError(Unavailable(
        "system shared memory is off on this farm: set \"frontend\": {\"system_shared_memory\": "
        "true} in its config to let loopback clients register regions (docs/kserve-v2.md)"));
  }
  const json call = query.contains(kSystemShmQuery) ? query.at(kSystemShmQuery) : json();
  const std::string op = call.is_string() ? call.get<std::string>() : "";
  std::string name;
  if (!QueryString(query, "name", &name)) {
    return SystemShmError(
        InvalidArgument("system shared memory: the region name must be a string"));
  }
  if (op == "status") {
    std::vector<SystemRegionInfo> regions;
    if (Status s = registry->SystemStatus(name, &regions); !s.ok()) return SystemShmError(s);
    json list = json::array();
    for (const SystemRegionInfo& r : regions) {
      list.push_back(
          {{"name", r.name}, {"key", r.key}, {"offset", r.offset}, {"byte_size", r.byte_size}});
    }
    return {{"regions", std::move(list)}};
  }
  if (op == "unregister") {
    if (Status s = registry->UnregisterSystem(name); !s.ok()) return SystemShmError(s);
    return json::object();
  }
  if (op == "register") {
    std::string key;
    uint64_t offset = 0;
    uint64_t byte_size = 0;
    if (!QueryString(query, "key", &key) || !QueryUnsigned(query, "offset", &offset) ||
        !QueryUnsigned(query, "byte_size", &byte_size)) {
      return SystemShmError(
          InvalidArgument("system shared memory register: expected a string key "
                          "and unsigned offset and byte_size"));
    }
    if (Status s = registry->RegisterSystem(name, key, offset, byte_size); !s.ok()) {
      return SystemShmError(s);
    }
    return json::object();
  }
  return SystemShmError(
      InvalidArgument("system shared memory: expected \"status\", \"register\" or "
                      "\"unregister\", got " +
                      call.dump()));
}

}  // namespace torchfarm
