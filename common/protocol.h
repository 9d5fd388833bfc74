// The client wire protocol, version 1 (specified in docs/protocol.md).
//
// A request is a ZeroMQ multipart message: frame 0 is a UTF-8 JSON header, frames 1..n the raw
// C-contiguous little-endian bytes of each input tensor. A reply is a JSON header followed by one
// frame per output tensor (none for errors). This file parses and checks request headers and
// builds reply headers; it is shared by the supervisor, the client library and the tests.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/tensor_spec.h"

namespace torchfarm {

inline constexpr int kProtocolVersion = 1;
// Hard ceiling on a request header; larger headers are rejected before JSON parsing.
inline constexpr size_t kMaxHeaderBytes = 64 * 1024;
inline constexpr size_t kMaxInputs = 16;

struct RequestHeader {
  nlohmann::json id;  // echoed verbatim in the reply; null when absent
  std::string model;
  std::vector<TensorSpec> inputs;
  int64_t timeout_ms = 0;  // 0: no deadline
  int priority = 0;        // 0 is highest
};

// Parses frame 0. On failure `out->id` still holds the id when the JSON was readable, so the
// error reply can carry it.
Status ParseRequestHeader(std::string_view text, RequestHeader* out);

// Checks that the frames after the header match the declared inputs one to one, by count and by
// byte size (dtype size x shape).
Status CheckInputFrames(const RequestHeader& header, const std::vector<size_t>& frame_sizes);

struct StageTimes {
  int64_t queue_us = 0;
  int64_t compute_us = 0;
  int64_t total_us = 0;
};

std::string MakeOkReply(const nlohmann::json& id, const std::vector<TensorSpec>& outputs,
                        const StageTimes& timing, int worker_id);
std::string MakeErrorReply(const nlohmann::json& id, const Status& status);

// What a client reads back from a reply header.
struct ReplyHeader {
  nlohmann::json id;
  Status status;  // ok, or the code and message of an error reply
  std::vector<TensorSpec> outputs;
  StageTimes timing;
  int worker_id = -1;
  nlohmann::json raw;
};
Status ParseReplyHeader(std::string_view text, ReplyHeader* out);

// {"dtype": "float32", "shape": [1, 256]} <-> TensorSpec, with messages naming `where`.
Status TensorSpecFromJson(const nlohmann::json& j, const std::string& where, bool allow_wildcard,
                          TensorSpec* out);
nlohmann::json TensorSpecToJson(const TensorSpec& spec);

}  // namespace torchfarm
