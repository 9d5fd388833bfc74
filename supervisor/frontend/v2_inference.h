// The Open Inference Protocol (KServe v2) inference request and response, independent of the
// transport, and their translation to and from the farm's wire protocol (docs/protocol.md).
//
// Owns: the v2 datatype names and their mapping to DType; the checks a v2 request gets before it
// becomes a farm job (datatype known, shape and byte count agree, names unique, BYTES refused);
// building the farm header + data frames; turning a farm reply into v2 outputs (names, the
// requested subset). The HTTP codec (v2_http_codec.h) and the gRPC service (grpc_service.h) fill
// and read these structs; neither talks to the farm's wire format directly. Runs on front-end
// threads; no state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/dtype.h"
#include "common/protocol.h"
#include "common/status.h"

namespace torchfarm {

// "FP32", "FP16", "BF16", "FP64", "INT64", "INT32", "INT16", "INT8", "UINT8", "BOOL" -> DType
// (common/dtype.h has both directions). "BYTES" and unknown names give INVALID_ARGUMENT naming
// `where` and listing the accepted names.
Status DTypeFromV2(std::string_view datatype, const std::string& where, DType* out);

// "inputs[1] ('x')": how errors name an input; a name over 128 bytes is shortened and its size
// given, so a hostile name cannot swell the message (a gRPC status travels in HTTP/2 trailers).
std::string V2InputWhere(size_t index, const std::string& name);

// The entry of model `name`, version `version`, in a "meta" reply's "models" (farm_channel.h;
// one entry per loaded version, admin/farm_status.cc). An empty `version` picks the entry marked
// "default" (else the model's first). NOT_FOUND names the served models when `name` is not among
// them, or the loaded versions when `version` is not one of them. An entry without "version"
// counts as version "1".
Status FindModelVersionInMeta(const nlohmann::json& meta, const std::string& name,
                              const std::string& version, const nlohmann::json** out);

// Triton's system shared memory parameters of a tensor (docs/kserve-v2.md "System shared
// memory"): shared_memory_region (a registered region's name), shared_memory_offset (from the
// start of the registered range) and shared_memory_byte_size. Unused: region empty.
struct V2ShmPlace {
  std::string region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  bool used() const { return !region.empty(); }
};

// One tensor. Its bytes are C-contiguous little-endian (row-major), itemsize x prod(shape) long,
// held in a zmq message so they travel to the loop without another copy.
struct V2Tensor {
  std::string name;
  std::string datatype;  // v2 name
  std::vector<int64_t> shape;
  zmq::message_t data;  // empty when `shm` is used: the bytes are in the region
  V2ShmPlace shm;
};

struct V2RequestedOutput {
  std::string name;
  bool binary = false;  // HTTP binary extension: "binary_data": true
  // Triton's classification extension: > 0 returns the top class_count as BYTES
  // (v2_classification.h).
  int64_t class_count = 0;
  V2ShmPlace shm;  // used: the output goes into this place of a registered region, not the body
};

struct V2InferRequest {
  std::string model;
  std::string version;  // empty: the default version (the latest loaded); else sent as "version"
  std::string id;       // echoed in the response; empty: none
  std::vector<V2Tensor> inputs;
  // Empty: every output. Otherwise these, in this order; an unknown or repeated name is
  // INVALID_ARGUMENT.
  std::vector<V2RequestedOutput> outputs;
  bool binary_outputs = false;  // HTTP: "parameters": {"binary_data_output": true}
  int64_t timeout_ms = 0;       // parameters "timeout" (µs in Triton: converted) or 0
  // parameters "priority" in Triton's meaning (0: the model's default level, 1: its highest);
  // the loop maps it to a level (JobAcceptor, TritonPriorityLevel). See V2PriorityToWire.
  int priority = 0;
  // parameters "client_weight" (0.01..100; 0: none): sent as the farm header's client_weight,
  // which may lower the client's configured weight, never raise it (common/client_weights.h).
  double client_weight = 0;
};

// A Triton priority (any uint64) as the farm header's "priority" (0..kMaxPriority): values past
// every model's priority_levels mean "the default level" in Triton, as 0 does, so they become 0.
int V2PriorityToWire(uint64_t priority);

struct V2InferResponse {
  std::string model;
  std::string version;
  std::string id;
  std::vector<V2Tensor> outputs;  // in the requested order; data holds the farm's frame
  std::vector<bool> binary;       // per output: send as binary (HTTP only); false for shm ones
  StageTimes timing;              // the farm's timing_us
};

// Room kept in the farm header for the "id" FarmChannel adds: ,"id":<20 digits>.
inline constexpr size_t kFarmIdReserveBytes = 32;

// True when an input or a requested output of `request` names a system shared-memory region.
bool UsesSystemShm(const V2InferRequest& request);

// The farm request for `request`: header (without "id"; FarmChannel adds it) and one data frame
// per input, moved out of `request`. Inputs travel by name; the loop puts them in the model's
// order. Errors name the input: "inputs[1] ('x'): datatype 'FP33' is not one of FP32, ...".
// `limits` (the loop's limits.request, FarmChannel::request_limits) bound the number of inputs
// and the header's size: a request past them is INVALID_ARGUMENT naming the limit, the value
// and the fields that made it (a 3 MiB input name, 5,000 inputs, a 70,000-byte model name).
// An input in system shared memory travels as "shm": {"region", "offset"} with no frame, its
// shared_memory_byte_size checked against its datatype and shape; outputs in it as the header's
// "outputs_shm" (common/shm_reference.h).
Status ToFarmRequest(V2InferRequest& request, const RequestLimits& limits, nlohmann::json* header,
                     std::vector<zmq::message_t>* frames);

// The same request as the loop's own structure, for the typed hand-off (FarmChannel::Call with a
// RequestHeader; no JSON written or parsed): the same checks and errors as ToFarmRequest, in the
// same order, and `header` field by field what ParseRequestHeader reads from ToFarmRequest's
// header (input names always; input_shm only when an input is in shared memory; strings that are
// not UTF-8 with U+FFFD where the JSON's dump would put it). The header's size is checked as
// ToFarmRequest checks it, its JSON written only when a cheap bound says it might not fit.
Status ToRequestHeader(V2InferRequest& request, const RequestLimits& limits, RequestHeader* header,
                       std::vector<zmq::message_t>* frames);

// Builds the v2 response from a farm reply to `request` (its outputs carry names; see
// docs/protocol.md). Takes the frames. An output `request` asked for that the model did not
// return is INVALID_ARGUMENT naming it and the outputs there are.
Status FromFarmReply(const V2InferRequest& request, const ReplyHeader& reply,
                     std::vector<zmq::message_t> frames, V2InferResponse* out);

// HTTP status of a farm code: 400 INVALID_ARGUMENT, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED,
// 504 DEADLINE_EXCEEDED, 503 UNAVAILABLE, 500 INTERNAL; 200 OK.
int HttpStatusOf(StatusCode code);

}  // namespace torchfarm
