#include "common/client_weights.h"

#include <algorithm>
#include <cmath>

#include "common/config_fields.h"

namespace torchfarm {

double ClientWeights::Configured(const std::string& client) const {
  auto it = by_client.find(client);
  return it == by_client.end() ? default_weight : it->second;
}

double ClientWeights::Effective(const std::string& client, double requested) const {
  const double configured = Configured(client);
  return requested > 0 ? std::min(configured, requested) : configured;
}

Status ClientWeightFromJson(const nlohmann::json& value, const std::string& key, double* out) {
  // is_number() covers integers and floats; NaN and infinities cannot come from JSON text, but a
  // json built in code could hold them, and no comparison below would catch a NaN.
  if (value.is_number()) {
    const double weight = value.get<double>();
    if (std::isfinite(weight) && weight >= kMinClientWeight && weight <= kMaxClientWeight) {
      *out = weight;
      return Status::Ok();
    }
  }
  return InvalidArgument(key + ": expected a number in 0.01..100 (a client weight), got " +
                         config_fields::Got(value));
}

Status ParseClientWeights(const nlohmann::json& j, const std::string& where, ClientWeights* out) {
  if (!j.is_object()) {
    return InvalidArgument(where + ": expected an object of client key: weight, got " +
                           config_fields::Got(j));
  }
  if (j.size() > kMaxClientWeightEntries) {
    return InvalidArgument(where + ": expected at most " + std::to_string(kMaxClientWeightEntries) +
                           " entries, got " + std::to_string(j.size()));
  }
  ClientWeights weights;
  for (const auto& [key, value] : j.items()) {
    if (key.empty() || key.size() > kMaxClientKeyBytes) {
      return InvalidArgument(where + ": expected client keys of 1.." +
                             std::to_string(kMaxClientKeyBytes) + " bytes, got one of " +
                             std::to_string(key.size()) + " bytes");
    }
    double weight = 1;
    if (Status s = ClientWeightFromJson(value, where + "[\"" + key + "\"]", &weight); !s.ok()) {
      return s;
    }
    if (key == kAnyClient) {
      weights.default_weight = weight;
    } else {
      weights.by_client.emplace(key, weight);
    }
  }
  *out = std::move(weights);
  return Status::Ok();
}

}  // namespace torchfarm
