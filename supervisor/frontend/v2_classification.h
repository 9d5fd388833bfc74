// Triton's classification extension (docs/kserve-v2.md, "Classification"): an output requested
// with a class count (HTTP outputs[].parameters.classification, gRPC outputs[].parameters
// ["classification"].int64_param) comes back as BYTES: for each row (dim 0 of an output of rank 2
// or more; the whole tensor for rank 1) the `class_count` largest values, largest first (ties: the
// lower index first), each the string "value:index" (value as printf's "%f" writes a float, an
// integer as itself), in Triton's BYTES layout (common/bytes_items.h). Shape [rows, k] (or [k]),
// k = min(class_count, classes per row).
//
// Owns: that conversion and the BYTES payload's JSON form. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "supervisor/frontend/v2_inference.h"

namespace torchfarm {

// The largest class_count accepted (a request for more gets every class anyway).
inline constexpr int64_t kMaxClassCount = int64_t{1} << 30;

// Replaces `tensor` (a numeric output) with its top-`class_count` BYTES form. INVALID_ARGUMENT
// for a 0-dim tensor, a BYTES one, or class_count < 1.
Status ClassifyOutput(int64_t class_count, V2Tensor* tensor);

// The items of a BYTES tensor's data as a JSON array of strings (HTTP's "data"); bytes that are not
// UTF-8 are replaced. Malformed data gives an empty array.
nlohmann::json BytesDataJson(const V2Tensor& tensor);

}  // namespace torchfarm
