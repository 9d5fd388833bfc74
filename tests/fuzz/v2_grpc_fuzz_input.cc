// The v2 gRPC request fuzzer's body (v2_grpc_fuzz_input.h).
#include "v2_grpc_fuzz_input.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/protocol.h"
#include "common/request_header_check.h"
#include "proto/grpc_service.pb.h"
#include "supervisor/frontend/grpc_service.h"
#include "supervisor/frontend/v2_inference.h"
#include "supervisor/frontend/v2_shm_parameters.h"

namespace torchfarm::fuzz {
namespace {

[[noreturn]] void GrpcBroken(const std::string& what) {
  std::fprintf(stderr, "v2 grpc fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

void CheckRefusal(const Status& s, const char* what) {
  if (s.ok()) return;
  if (s.code() != StatusCode::kInvalidArgument || s.message().empty()) {
    GrpcBroken(std::string(what) +
               ": a refusal must be INVALID_ARGUMENT with a message: " + s.ToString());
  }
}

// The text parsers of the extension, on any bytes.
void RunShmTextParsers(std::string_view text) {
  (void)IsLoopbackPeer(text);
  std::string key;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  const Status body = ParseSystemShmRegisterBody(text, &key, &offset, &byte_size);
  CheckRefusal(body, "register body");
  if (body.ok() &&
      (byte_size == 0 || byte_size > (uint64_t{1} << 62) || offset > (uint64_t{1} << 62))) {
    GrpcBroken("register body accepted out of range");
  }
  const nlohmann::json params = nlohmann::json::parse(text, nullptr, false);
  if (!params.is_object()) return;
  V2ShmPlace place;
  const Status s = ParseV2ShmParameters(params, "inputs[0]", &place);
  CheckRefusal(s, "shm parameters");
  if (s.ok() && place.used() != params.contains("shared_memory_region")) {
    GrpcBroken("shm parameters: used() disagrees with the region key");
  }
  if (s.ok() && place.used() && (place.byte_size == 0 || place.region.empty())) {
    GrpcBroken("shm parameters accepted without a byte size or a region");
  }
}

// Issue 36: the typed hand-off gives the loop what it would read from ToFarmRequest's JSON, and
// refuses what either side refuses with the same status (tests/frontend/v2_inference_test.cc
// holds the same on a table).
void CheckTypedGrpc(V2InferRequest& as_json, V2InferRequest& as_typed) {
  nlohmann::json header;
  std::vector<zmq::message_t> json_frames;
  RequestHeader typed;
  std::vector<zmq::message_t> typed_frames;
  const Status json_status = ToFarmRequest(as_json, RequestLimits{}, &header, &json_frames);
  const Status typed_status = ToRequestHeader(as_typed, RequestLimits{}, &typed, &typed_frames);
  if (json_status.ToString() != typed_status.ToString()) {
    GrpcBroken("ToRequestHeader and ToFarmRequest disagree: " + typed_status.ToString() + " | " +
               json_status.ToString());
  }
  if (!json_status.ok()) return;
  RequestHeader parsed;
  const Status parse_status = ParseRequestHeader(
      header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), &parsed);
  const Status check_status = CheckRequestHeader(typed, RequestLimits{});
  if (parse_status.ToString() != check_status.ToString()) {
    GrpcBroken("CheckRequestHeader and the loop's parse disagree: " + check_status.ToString() +
               " | " + parse_status.ToString());
  }
  if (!parse_status.ok()) return;
  if (typed.model != parsed.model || typed.version != parsed.version ||
      typed.inputs != parsed.inputs || typed.input_names != parsed.input_names ||
      typed.timeout_ms != parsed.timeout_ms || typed.priority != parsed.priority ||
      typed.client_weight != parsed.client_weight ||
      typed.input_shm.size() != parsed.input_shm.size() ||
      typed.output_places.size() != parsed.output_places.size() ||
      typed_frames.size() != json_frames.size()) {
    GrpcBroken("ToRequestHeader's header differs from the parse of ToFarmRequest's");
  }
}

void CheckAcceptedGrpc(V2InferRequest& request) {
  size_t in_shm = 0;
  for (const V2Tensor& input : request.inputs) in_shm += input.shm.used() ? 1 : 0;
  size_t placed = 0;
  for (const V2RequestedOutput& output : request.outputs) placed += output.shm.used() ? 1 : 0;
  const Status allowed = CheckV2ShmAllowed(request, true, "ipv4:10.0.0.1:1");
  if (allowed.ok() != (in_shm + placed == 0)) GrpcBroken("a remote peer may use shared memory");
  CheckRefusal(CheckV2ShmAllowed(request, true, "ipv4:127.0.0.1:1"), "loopback");
  nlohmann::json header;
  std::vector<zmq::message_t> frames;
  const size_t inputs = request.inputs.size();
  const Status s = ToFarmRequest(request, RequestLimits{}, &header, &frames);
  CheckRefusal(s, "ToFarmRequest");
  if (!s.ok()) return;
  if (frames.size() != inputs - in_shm) GrpcBroken("one frame per input not in shared memory");
  RequestHeader parsed;
  if (!ParseRequestHeaderJson(header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                              &parsed)
           .ok()) {
    return;  // a name the loop refuses (it answers the error); nothing to compare
  }
  if (parsed.output_places.size() != placed) GrpcBroken("outputs_shm lost an output");
  size_t refs = 0;
  for (size_t i = 0; i < parsed.inputs.size(); ++i) refs += parsed.input_in_shm(i) ? 1 : 0;
  if (refs != in_shm) GrpcBroken("an input's shm reference was lost");
}

}  // namespace

void RunV2GrpcInput(const uint8_t* data, size_t size) {
  RunShmTextParsers(std::string_view(reinterpret_cast<const char*>(data), size));
  inference::ModelInferRequest proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return;
  V2InferRequest request;
  const Status s = V2RequestFromProto(proto, &request);
  CheckRefusal(s, "V2RequestFromProto");
  if (s.ok()) {
    V2InferRequest as_json;
    V2InferRequest as_typed;
    if (V2RequestFromProto(proto, &as_json).ok() && V2RequestFromProto(proto, &as_typed).ok()) {
      CheckTypedGrpc(as_json, as_typed);
    }
    CheckAcceptedGrpc(request);
  }
  // The answer side: any accepted request's inputs, echoed as outputs (placed ones without data).
  inference::ModelInferResponse response;
  V2InferResponse v2;
  for (V2Tensor& input : request.inputs) v2.outputs.push_back(std::move(input));
  V2ResponseToProto(v2, &response);
  if (response.raw_output_contents_size() != response.outputs_size()) {
    GrpcBroken("raw_output_contents must keep one entry per output");
  }
}

}  // namespace torchfarm::fuzz
