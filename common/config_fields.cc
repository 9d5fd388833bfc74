#include "common/config_fields.h"

#include <algorithm>

namespace torchfarm::config_fields {

using nlohmann::json;

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

Status GetBool(const json& j, const std::string& key, const std::string& where, bool* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  if (!it->is_boolean()) {
    return InvalidArgument(where + "." + key + ": expected true or false, got " + Got(*it));
  }
  *out = it->get<bool>();
  return Status::Ok();
}

}  // namespace torchfarm::config_fields
