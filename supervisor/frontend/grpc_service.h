// The gRPC messages of the Open Inference Protocol (Triton's proto/triton/grpc_service.proto, a
// superset of KServe's proto/grpc_predict_v2.proto) <-> torchfarm's
// transport-neutral v2 types (v2_inference.h) and the loop's metadata replies (farm_channel.h).
//
// Owns: reading a ModelInferRequest (inputs from raw_input_contents, or from each input's typed
// contents converted to the little-endian bytes of its datatype; "timeout" and "priority"
// parameters), writing a ModelInferResponse (outputs always as raw_output_contents), filling the
// metadata and readiness responses from a "meta" reply, and the farm code -> gRPC code mapping.
// Pure functions with no state; the GrpcServer (grpc_server.cc) calls them on gRPC's threads and
// the FarmChannels' threads.
#pragma once

#include <grpcpp/support/status.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "proto/grpc_service.pb.h"
#include "supervisor/frontend/v2_inference.h"

namespace torchfarm {

// INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, UNAVAILABLE and INTERNAL
// map to the gRPC codes of the same name.
grpc::StatusCode GrpcCodeOf(StatusCode code);
grpc::Status ToGrpcStatus(const Status& status);

// Reads `request` into `out`. Every input takes its bytes from raw_input_contents[i] when that
// field is used (then it must hold exactly one entry per input and no input may carry
// `contents`), else from its `contents`, whose field for the datatype (fp32_contents for FP32,
// int_contents for INT8/16/32, ...) must hold one value per element. FP16 and BF16 have no typed
// field and must come raw. Errors are INVALID_ARGUMENT naming the input: "inputs[1] ('x'): ...".
Status V2RequestFromProto(const inference::ModelInferRequest& request, V2InferRequest* out);

// Writes `response` to `out`: names, datatypes and shapes in `outputs`, bytes in
// raw_output_contents (in the same order).
void V2ResponseToProto(const V2InferResponse& response, inference::ModelInferResponse* out);

// The entry of model `name` in a "meta" reply's "models" (farm_channel.h). NOT_FOUND names the
// served models when `name` is not among them, or the versions when `version` is given and is not
// one of the model's.
Status FindModelInMeta(const nlohmann::json& meta, const std::string& name,
                       const std::string& version, const nlohmann::json** out);

// ModelMetadataJson (supervisor/dispatch/model_metadata.h) -> ModelMetadataResponse. INTERNAL when
// the entry is malformed.
Status ModelMetadataFromJson(const nlohmann::json& model, inference::ModelMetadataResponse* out);

// ServerMetadataResponse: name "torchfarm", the build's version, the extensions the gRPC front end
// serves (kV2Extensions, and system_shared_memory when `system_shared_memory`).
void FillServerMetadata(inference::ServerMetadataResponse* out, bool system_shared_memory = false);

// LogSettings' map <-> the JSON object of supervisor/admin/log_settings.h. A value with no
// parameter set is INVALID_ARGUMENT naming its key.
Status LogSettingsFromProto(const inference::LogSettingsRequest& request, nlohmann::json* out);
void LogSettingsToProto(const nlohmann::json& settings, inference::LogSettingsResponse* out);

// Fills `out` from Triton's JSON form of it (TritonModelConfigJson, TritonModelStatsJson: field
// names as in the .proto, enums by name); INTERNAL naming the message when it does not fit.
Status MessageFromJson(const nlohmann::json& json, google::protobuf::Message* out);

}  // namespace torchfarm
