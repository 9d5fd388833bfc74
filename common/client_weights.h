// Per-client weights of a model's fair shares (config "client_weights", a request's
// "client_weight"; docs/scheduling.md, "Client weights").
//
// Owns: the operator's table of weights by client key, and the rule that combines it with a
// request's own weight. A client key is what the supervisor already counts a client by
// (supervisor/intake/client_quota.h): the CURVE public key (Z85, 40 characters) when the job socket
// runs CURVE, else the ZeroMQ routing id (a client sets it with ZMQ_ROUTING_ID); for a KServe v2
// request, the value of its frontend.client_id_header when the config sets one and the request
// carries it, else a key of its connection that no table can name; "*" weighs every client the
// table does not name. Within a priority level a client's fair tag advances by
// rows / weight (supervisor/dispatch/model_queue.h), so with weights 1:2:4 and everyone
// backlogged the rows served go 1:2:4. Pure; safe on any thread.
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace torchfarm {

// Documented bounds of every weight, configured or asked for by a request.
inline constexpr double kMinClientWeight = 0.01;
inline constexpr double kMaxClientWeight = 100;
// Entries of one model's "client_weights", and the bytes of one key (a ZeroMQ routing id is at
// most 255 bytes; a CURVE key is 40).
inline constexpr size_t kMaxClientWeightEntries = 4096;
inline constexpr size_t kMaxClientKeyBytes = 255;
// The key that weighs every client the table does not name.
inline constexpr const char* kAnyClient = "*";

struct ClientWeights {
  std::map<std::string, double> by_client;  // without "*"
  double default_weight = 1;                // "*", else 1

  // The weight the operator gave `client`.
  double Configured(const std::string& client) const;
  // The weight a request of `client` is queued with: its own `requested` weight (0: none) may
  // lower the configured one, never raise it, so no client grants itself more than the operator
  // did.
  double Effective(const std::string& client, double requested) const;
  bool empty() const { return by_client.empty() && default_weight == 1; }
};

// `value` as a weight in kMinClientWeight..kMaxClientWeight, or the refusal naming `key`:
// "KEY: expected a number in 0.01..100, got number 0".
Status ClientWeightFromJson(const nlohmann::json& value, const std::string& key, double* out);

// A model's "client_weights": {"tenant-a": 4, "*": 0.5}; each key 1..255 bytes, each weight
// 0.01..100, at most 4096 entries. Errors name `where`, the key and what was received.
Status ParseClientWeights(const nlohmann::json& j, const std::string& where, ClientWeights* out);

}  // namespace torchfarm
