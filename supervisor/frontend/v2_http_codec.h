// The bodies of the Open Inference Protocol (KServe v2) over HTTP: inference requests and
// responses in JSON and with Triton's binary tensor extension, server and model metadata, errors.
//
// Owns: the v2 HTTP JSON format (field names, which are required, their types and ranges) and the
// binary layout (the first Inference-Header-Content-Length bytes are JSON, then each binary tensor
// in order, `parameters.binary_data_size` bytes each). Every error names the field, what was
// expected and what was received. Pure functions, no sockets; front-end threads and the fuzzer.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "supervisor/frontend/v2_inference.h"

namespace torchfarm {

inline constexpr const char* kInferenceHeaderContentLength = "Inference-Header-Content-Length";
// Deepest nesting of arrays and objects in a request's JSON: rank-8 nested data sits at depth 11.
inline constexpr int kMaxV2JsonDepth = 32;
// Triton's request parameter "timeout" is in microseconds; the farm's in milliseconds.
inline constexpr int64_t kMicrosPerMilli = 1000;

// Reads an Inference-Header-Content-Length value: an integer 0..body_size.
Status ParseInferenceHeaderLength(std::string_view value, size_t body_size, size_t* json_bytes);

// Parses an infer request body. `json_bytes`: the JSON part's length (body->size() when the
// request had no Inference-Header-Content-Length). Binary inputs reference `body` without a copy
// (their messages keep it alive); JSON `data` is decoded into new messages. Sets id, inputs,
// outputs, binary_outputs, timeout_ms and priority; the caller sets model and version.
// Tries ParseV2InferRequestFast (v2_request_scanner.h) first, then ParseV2InferRequestJson.
Status ParseV2InferRequest(std::shared_ptr<const std::string> body, size_t json_bytes,
                           V2InferRequest* out);
// The DOM half of ParseV2InferRequest: an nlohmann parse, every field checked, every error
// worded here. Public so tests and the fuzzer can hold the fast path against it.
Status ParseV2InferRequestJson(const std::shared_ptr<const std::string>& body, size_t json_bytes,
                               V2InferRequest* out);

// A message over `size` bytes of `body` at `offset` that keeps `body` alive until ZeroMQ frees
// the message: how binary inputs travel to the loop without a copy.
zmq::message_t V2BodySlice(const std::shared_ptr<const std::string>& body, size_t offset,
                           size_t size);

// A response body: `json_bytes` is set when it carries binary outputs after the JSON (send it as
// Inference-Header-Content-Length); unset for a plain JSON body.
struct V2HttpBody {
  std::string bytes;
  std::optional<size_t> json_bytes;
};
// {"model_name", "model_version", "id"?, "outputs": [{"name", "datatype", "shape", "data"} or
// {..., "parameters": {"binary_data_size": N}} for binary outputs]} then the binary outputs.
V2HttpBody WriteV2InferResponse(const V2InferResponse& response);

// {"error": message}
std::string V2ErrorBody(std::string_view message);
// {"name": "torchfarm", "version": ..., "extensions": ["binary_tensor_data", kV2Extensions...,
// and "system_shared_memory" when `system_shared_memory` (frontend.system_shared_memory)]}: the
// extensions this HTTP front end serves.
std::string V2ServerMetadataBody(bool system_shared_memory = false);
// The v2 model metadata for one entry of the loop's "meta" reply (ModelMetadataJson):
// {"name", "versions", "platform", "inputs", "outputs"}.
std::string V2ModelMetadataBody(const nlohmann::json& model);

}  // namespace torchfarm
