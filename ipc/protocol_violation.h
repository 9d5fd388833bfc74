// What the supervisor does with a value a worker wrote into shared memory before it uses it: the
// worker is an untrusted writer of its segment (docs/security.md, "Trust boundary"). Every ring
// index it writes is checked against the range the ring's layout and the supervisor's own indices
// allow (CheckIndex); a response slot's header is checked by ipc/slot_codec.h ReadResponse. A value
// outside its bound is a ProtocolViolation: the worker's fault, never a client's, and never read
// past (supervisor/workers/worker_slot.h OnProtocolViolation kills and restarts the worker).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace torchfarm::ipc {

struct ProtocolViolation {
  std::string field;  // what was read: "response_head", "request_tail", "response slot header"
  std::string value;  // what it held
  std::string bound;  // what the layout allows, and why
};

// `value` of the index `field` must lie in [low, high]; nullopt when it does. `why()` says where
// the bounds come from; called only on a violation, so the check costs two compares per read.
template <typename Why>
std::optional<ProtocolViolation> CheckIndex(const char* field, uint64_t value, uint64_t low,
                                            uint64_t high, Why&& why) {
  if (value >= low && value <= high) return std::nullopt;
  return ProtocolViolation{field, std::to_string(value),
                           "[" + std::to_string(low) + ", " + std::to_string(high) + "]: " + why()};
}

}  // namespace torchfarm::ipc
