// The readers every config section uses (common/config.cc, model_config.cc, pipeline_config.cc,
// model_versions.cc). Each error names the JSON path, what was expected and what was received;
// integers keep their real type and range (common/number_parse.h), never wrapped or truncated.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/number_parse.h"
#include "common/status.h"

namespace torchfarm::config_fields {

// A received value for an error message: its JSON type and text, e.g. `string "x"`.
std::string Got(const nlohmann::json& v);

// Rejects keys outside `allowed`, naming them and listing what is accepted.
Status CheckKeys(const nlohmann::json& j, const std::string& where,
                 const std::vector<std::string>& allowed);

// `key` of `j` into *out when present: a non-empty string. Missing is an error only if `required`.
Status GetString(const nlohmann::json& j, const std::string& key, const std::string& where,
                 bool required, std::string* out);

// `key` of `j` into *out when present: an integer in min..max.
template <typename Int>
Status GetInt(const nlohmann::json& j, const std::string& key, const std::string& where,
              int64_t min, int64_t max, Int* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  return IntegerFromJson(*it, where + "." + key, min, max, out);
}

// `key` of `j` into *out when present: true or false.
Status GetBool(const nlohmann::json& j, const std::string& key, const std::string& where,
               bool* out);

}  // namespace torchfarm::config_fields
