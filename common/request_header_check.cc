// CheckRequestHeader (request_header_check.h). Each refusal is worded by the function the JSON
// path words it with (IntegerFromJson, ClientWeightFromJson, the same literal texts), given the
// value as the JSON it would have been, so the two paths cannot drift apart in their messages.
#include "common/request_header_check.h"

#include <string>

#include <nlohmann/json.hpp>

#include "common/client_weights.h"
#include "common/model_versions.h"
#include "common/number_parse.h"
#include "common/tensor_names.h"

namespace torchfarm {

using nlohmann::json;

namespace {

// IntegerFromJson's refusal of `value` for `key` when it is outside min..max; else OK.
template <typename Int>
Status HeaderIntegerIn(Int value, const std::string& key, int64_t min, int64_t max) {
  int64_t unused = 0;
  return IntegerFromJson(json(value), key, min, max, &unused);
}

std::string DumpHeaderString(const std::string& text) {
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

// inputs[i]: its shared-memory reference, spec, name and rank, as ReadInput checks them.
Status CheckHeaderInput(const RequestHeader& header, size_t i, const RequestLimits& limits) {
  const std::string where = "inputs[" + std::to_string(i) + "]";
  if (header.input_in_shm(i)) {
    const ShmRef& ref = header.input_shm[i];
    if (Status s = HeaderIntegerIn(ref.offset, where + ".shm.offset", 0, INT64_MAX); !s.ok()) {
      return s;
    }
    if (ref.bytes != 0) {
      return InvalidArgument(where +
                             ".shm: unknown key 'bytes' (expected {\"region\": "
                             "\"<token>\", \"offset\": N})");
    }
  }
  const TensorSpec& spec = header.inputs[i];
  if (spec.shape.size() > static_cast<size_t>(kMaxRank)) {
    return InvalidArgument(where + ".shape: rank " + std::to_string(spec.shape.size()) +
                           " exceeds the maximum of " + std::to_string(kMaxRank));
  }
  for (size_t k = 0; k < spec.shape.size(); ++k) {
    if (spec.shape[k] >= 0) continue;
    return HeaderIntegerIn(spec.shape[k], where + ".shape[" + std::to_string(k) + "]", 0,
                           INT64_MAX);
  }
  if (i < header.input_names.size() && !ValidTensorName(header.input_names[i])) {
    return InvalidArgument(where + ".name: expected 1.." + std::to_string(kMaxTensorNameBytes) +
                           " of the characters A-Z a-z 0-9 _ . : -, got " +
                           DumpHeaderString(header.input_names[i]));
  }
  if (!header.input_names.empty() && i >= header.input_names.size()) {
    return InvalidArgument(where +
                           ".name: missing, but inputs[0] has one; name every input or "
                           "none");
  }
  if (spec.shape.size() > static_cast<size_t>(limits.max_rank)) {
    return InvalidArgument(where + ".shape: rank " + std::to_string(spec.shape.size()) +
                           " exceeds the maximum of " + std::to_string(limits.max_rank) +
                           " (limits.max_rank)");
  }
  return Status::Ok();
}

// "outputs_shm", as OutputPlacesFromJson checks it.
Status CheckHeaderOutputPlaces(const std::vector<OutputPlace>& places) {
  const std::string where = "header field 'outputs_shm'";
  if (places.size() > kMaxOutputPlaces) {
    return InvalidArgument(where + ": expected an array of 1.." + std::to_string(kMaxOutputPlaces) +
                           " [{\"name\", \"region\", \"offset\", \"bytes\"}], got " +
                           std::to_string(places.size()) + " entries");
  }
  for (size_t i = 0; i < places.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const OutputPlace& place = places[i];
    if (place.name.empty()) return InvalidArgument(at + ".name: expected an output name, got \"\"");
    for (size_t k = 0; k < i; ++k) {
      if (places[k].name == place.name) {
        return InvalidArgument(at + ".name: output '" + place.name + "' is placed twice");
      }
    }
    if (place.ref.region.empty()) {
      return InvalidArgument(at + ".region: expected the token shm_create returned, got \"\"");
    }
    if (Status s = HeaderIntegerIn(place.ref.offset, at + ".offset", 0, INT64_MAX); !s.ok()) {
      return s;
    }
    if (Status s = HeaderIntegerIn(place.ref.bytes, at + ".bytes", 0, INT64_MAX); !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

// timeout_ms, deadline_unix_us, priority and client_weight, as ReadOptionalFields checks them
// (0: absent).
Status CheckHeaderOptionalFields(const RequestHeader& header) {
  if (header.timeout_ms < 0) {
    return HeaderIntegerIn(header.timeout_ms, "header field 'timeout_ms'", 0, INT64_MAX);
  }
  if (header.deadline_unix_us < 0) {
    return HeaderIntegerIn(header.deadline_unix_us, "header field 'deadline_unix_us'", 0,
                           INT64_MAX);
  }
  if (Status s = HeaderIntegerIn(header.priority, "header field 'priority'", 0, kMaxPriority);
      !s.ok()) {
    return s;
  }
  if (header.client_weight != 0) {
    double weight = 0;
    if (Status s = ClientWeightFromJson(json(header.client_weight), "header field 'client_weight'",
                                        &weight);
        !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckRequestHeader(const RequestHeader& header, const RequestLimits& limits) {
  if (header.op != RequestOp::kInfer) {
    return InvalidArgument("header field 'op': expected \"infer\" in a header built in code");
  }
  if (header.model.empty()) {
    return InvalidArgument("header field 'model': expected a non-empty string");
  }
  if (!header.version.empty() && !ValidVersion(header.version)) {
    return InvalidArgument(
        "header field 'version': expected a string of 1.." + std::to_string(kMaxVersionLength) +
        " letters, digits, '_', '-' or '.', got " + DumpHeaderString(header.version));
  }
  if (header.inputs.empty()) {
    return InvalidArgument(
        "header field 'inputs': expected a non-empty array of "
        "{\"dtype\", \"shape\"}");
  }
  if (header.inputs.size() > limits.max_inputs) {
    return InvalidArgument("header field 'inputs': " + std::to_string(header.inputs.size()) +
                           " inputs exceed the maximum of " + std::to_string(limits.max_inputs));
  }
  if (header.input_names.size() > header.inputs.size() ||
      (!header.input_shm.empty() && header.input_shm.size() != header.inputs.size())) {
    return InvalidArgument("header: " + std::to_string(header.inputs.size()) + " inputs with " +
                           std::to_string(header.input_names.size()) + " names and " +
                           std::to_string(header.input_shm.size()) +
                           " shared-memory entries; expected none or one per input");
  }
  for (size_t i = 0; i < header.inputs.size(); ++i) {
    if (Status s = CheckHeaderInput(header, i, limits); !s.ok()) return s;
  }
  if (Status s = CheckHeaderOptionalFields(header); !s.ok()) return s;
  return CheckHeaderOutputPlaces(header.output_places);
}

}  // namespace torchfarm
