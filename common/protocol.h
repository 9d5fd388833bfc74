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

#include "common/shm_reference.h"
#include "common/status.h"
#include "common/tensor_spec.h"

namespace torchfarm {

inline constexpr int kProtocolVersion = 1;
// Hard ceiling on a request header; larger headers are rejected before JSON parsing.
inline constexpr size_t kMaxHeaderBytes = 64 * 1024;
inline constexpr size_t kMaxInputs = 16;
// Outputs of one reply; a model that returns more fails its batch (INTERNAL).
inline constexpr size_t kMaxOutputs = 16;
// Deepest nesting of arrays and objects in a header (the id included). Copying and printing a JSON
// value recurses once per level, so a 64 KiB "[[[[..." id would otherwise overflow the stack.
inline constexpr int kMaxHeaderDepth = 32;
// The header field "priority": 0 (highest) .. kMaxPriority.
inline constexpr int kMaxPriority = 1000;

// True when no array or object in `text` nests deeper than `max_depth`. One pass, strings and
// escapes skipped; meant to run before json::parse on untrusted text.
bool JsonNestingWithin(std::string_view text, int max_depth);

// What one request may cost the supervisor before any model looks at it. Defaults are the
// protocol's own ceilings; the supervisor fills these from the config's "limits" (config.h).
// Every limit is checked before the bytes it bounds are used, and its error names the limit.
struct RequestLimits {
  size_t max_header_bytes = kMaxHeaderBytes;
  size_t max_inputs = kMaxInputs;  // data frames after the header ("max_frames" - 1)
  int max_rank = kMaxRank;
  uint64_t max_tensor_bytes = uint64_t{1} << 40;   // one input's bytes
  uint64_t max_request_bytes = uint64_t{1} << 40;  // header + every data frame
  // One item of a bytes input (common/bytes_items.h): an encoded image. The config's default is
  // lower (config.h).
  uint64_t max_item_bytes = uint64_t{1} << 32;
};

struct RequestHeader {
  nlohmann::json id;  // echoed verbatim in the reply; null when absent
  std::string model;
  // Empty: the model's default version (the latest loaded); else 1..32 of [A-Za-z0-9_.-]
  // (common/model_versions.h).
  std::string version;
  std::vector<TensorSpec> inputs;
  // Empty, or one "name" per input (a request names every input or none): the supervisor then
  // puts the inputs into the model's declared order (supervisor/intake/job_intake.h).
  std::vector<std::string> input_names;
  int64_t timeout_ms = 0;  // 0: no deadline
  // The client's own deadline: microseconds since the Unix epoch on the client's wall clock
  // (0: none). The supervisor converts it with its own wall clock on arrival (the clocks must
  // agree: the same host, or NTP), so time the request spent before the supervisor read it
  // (a client's late send, a socket's queue) counts; the nearer of it and timeout_ms applies.
  int64_t deadline_unix_us = 0;
  int priority = 0;        // 0 is highest, kMaxPriority lowest
  // The client's own weight in its model's fair shares (0.01..100; 0: none given): it may lower
  // the weight the config gives the client, never raise it (common/client_weights.h).
  double client_weight = 0;
  // Client shared memory (shm_reference.h). input_shm is empty, or one entry per input (unused
  // entries travel as data frames); output_shm.used(): outputs go to that range, not to frames.
  std::vector<ShmRef> input_shm;
  ShmRef output_shm;
  // The v2 front ends' outputs in system shared memory ("outputs_shm", shm_reference.h); the
  // job socket refuses them (supervisor/intake/job_intake.cc).
  std::vector<OutputPlace> output_places;
  // Commands instead of inference: shm_create takes shm_bytes, shm_release shm_region.
  RequestOp op = RequestOp::kInfer;
  uint64_t shm_bytes = 0;
  std::string shm_region;

  bool input_in_shm(size_t i) const { return i < input_shm.size() && input_shm[i].used(); }
};

// Parses frame 0. On failure `out->id` still holds the id when the JSON was readable, so the
// error reply can carry it. Tries ParseRequestHeaderFast first, then ParseRequestHeaderJson.
Status ParseRequestHeader(std::string_view text, RequestHeader* out,
                          const RequestLimits& limits = RequestLimits{});

// The two halves of ParseRequestHeader, public so tests and the fuzzer can hold them against each
// other. The fast path is a single scan for the common header (plain keys, ASCII strings without
// escapes, non-negative integers, an id that is null, a boolean, such an integer or such a
// string, input names of tensor-name characters); it returns true only for a header it fully read
// and found valid, with the same result the JSON path would give. Anything else (every error
// included) returns false with *out partly filled, and the JSON path, a full nlohmann parse,
// starts over, decides and words the error.
bool ParseRequestHeaderFast(std::string_view text, RequestHeader* out,
                            const RequestLimits& limits = RequestLimits{});
Status ParseRequestHeaderJson(std::string_view text, RequestHeader* out,
                              const RequestLimits& limits = RequestLimits{});

// Checks that the frames after the header match the declared inputs that are not in shared
// memory one to one, by count and by byte size (dtype size x shape); and every input, frame or
// shared memory, against limits.max_tensor_bytes. A bytes input (DType::kBytes) travels as a
// frame, never in shared memory; its frame is checked by size here and by its items in
// CheckBytesFrames.
Status CheckInputFrames(const RequestHeader& header, const std::vector<size_t>& frame_sizes,
                        const RequestLimits& limits = RequestLimits{});
// The items of every bytes input against its shape and limits.max_item_bytes
// (common/bytes_items.h); `frames` as in CheckInputFrames, with their bytes.
Status CheckBytesFrames(const RequestHeader& header, const std::vector<std::string_view>& frames,
                        const RequestLimits& limits = RequestLimits{});

struct StageTimes {
  int64_t queue_us = 0;
  int64_t compute_us = 0;
  int64_t total_us = 0;
  // The worker's pipeline stages (worker/pipeline_stages.h), for models that have them: the
  // batch's time in each, included in compute_us. -1: the model has no such stage (not in the
  // reply's timing_us).
  int64_t decode_us = -1;
  int64_t preprocess_us = -1;
  int64_t postprocess_us = -1;
};

// An "ok" reply header's text, written into a buffer the caller owns: at most bound() bytes at
// `out`, Write returning their end. MakeOkReply is this into a string; the reply writer writes it
// straight into the block its message owns (supervisor/dispatch/reply_backlog.h), one allocation
// fewer a reply (issue 36). Holds references to its arguments: use it while they live.
class OkReplyText {
 public:
  OkReplyText(const nlohmann::json& id, const std::vector<TensorSpec>& outputs,
              const std::vector<std::string>& output_names, const StageTimes& timing, int worker_id,
              std::string_view shm_region = {}, const std::vector<uint64_t>* shm_offsets = nullptr);
  // It keeps references: a temporary argument would be gone before Write reads it.
  OkReplyText(const nlohmann::json&& id, const std::vector<TensorSpec>& outputs,
              const std::vector<std::string>& output_names, const StageTimes& timing, int worker_id,
              std::string_view shm_region = {},
              const std::vector<uint64_t>* shm_offsets = nullptr) = delete;
  OkReplyText(const nlohmann::json& id, const std::vector<TensorSpec>&& outputs,
              const std::vector<std::string>& output_names, const StageTimes& timing, int worker_id,
              std::string_view shm_region = {},
              const std::vector<uint64_t>* shm_offsets = nullptr) = delete;
  OkReplyText(const nlohmann::json& id, const std::vector<TensorSpec>& outputs,
              const std::vector<std::string>&& output_names, const StageTimes& timing,
              int worker_id, std::string_view shm_region = {},
              const std::vector<uint64_t>* shm_offsets = nullptr) = delete;
  OkReplyText(const nlohmann::json& id, const std::vector<TensorSpec>& outputs,
              const std::vector<std::string>& output_names, const StageTimes&& timing,
              int worker_id, std::string_view shm_region = {},
              const std::vector<uint64_t>* shm_offsets = nullptr) = delete;
  size_t bound() const { return bound_; }
  char* Write(char* out) const;

 private:
  static constexpr size_t kIntChars = 20;  // any 64-bit integer, sign included
  const nlohmann::json& id_;
  const std::vector<TensorSpec>& outputs_;
  const std::vector<std::string>& output_names_;
  const StageTimes& timing_;
  int worker_id_;
  std::string_view shm_region_;
  const std::vector<uint64_t>* shm_offsets_;
  std::string id_text_;                    // an id not an unsigned integer or null, dumped (rare)
  std::vector<std::string> dumped_names_;  // names that need escaping, dumped (rare)
  size_t bound_ = 0;
};

// Every output carries a "name": output_names[k], or OUTPUT__k beyond them
// (common/tensor_names.h). `shm_offsets`, when given, are where each output was written in region
// `shm_region` (PlaceOutputs): the reply names them and carries no data frames.
std::string MakeOkReply(const nlohmann::json& id, const std::vector<TensorSpec>& outputs,
                        const std::vector<std::string>& output_names, const StageTimes& timing,
                        int worker_id, const std::string& shm_region = {},
                        const std::vector<uint64_t>* shm_offsets = nullptr);
// The same with every output named OUTPUT__k.
std::string MakeOkReply(const nlohmann::json& id, const std::vector<TensorSpec>& outputs,
                        const StageTimes& timing, int worker_id,
                        const std::string& shm_region = {},
                        const std::vector<uint64_t>* shm_offsets = nullptr);
std::string MakeErrorReply(const nlohmann::json& id, const Status& status);

// What a client reads back from a reply header.
struct ReplyHeader {
  nlohmann::json id;
  Status status;  // ok, or the code and message of an error reply
  std::vector<TensorSpec> outputs;
  // One per output: its "name", or OUTPUT__k for a reply without names (servers before names).
  std::vector<std::string> output_names;
  std::vector<ShmRef> output_shm;  // per output when the request named output_shm; else empty
  StageTimes timing;
  int worker_id = -1;
  nlohmann::json raw;
};
// Parses a reply's frame 0 whole: every field above, and `raw`, the header as a JSON object.
Status ParseReplyHeader(std::string_view text, ReplyHeader* out);
// The same, without `raw` for the common reply (the layout MakeOkReply writes: an "ok" answer,
// outputs with plain names, no shared memory), for which a single scan fills every other field
// as ParseReplyHeader would (about a tenth of the instructions: no JSON object is built). Any
// other reply goes through ParseReplyHeader, `raw` included. For callers that read the typed
// fields only (the front ends' channel).
Status ParseReplyHeaderLean(std::string_view text, ReplyHeader* out);
// The two halves, public so tests and the fuzzer can hold them against each other: the fast
// scan returns true only for a reply it fully read, with ParseReplyHeaderJson's result less `raw`.
bool ParseReplyHeaderFast(std::string_view text, ReplyHeader* out);
Status ParseReplyHeaderJson(std::string_view text, ReplyHeader* out);

// {"dtype": "float32", "shape": [1, 256]} <-> TensorSpec, with messages naming `where`.
Status TensorSpecFromJson(const nlohmann::json& j, const std::string& where, bool allow_wildcard,
                          TensorSpec* out);
nlohmann::json TensorSpecToJson(const TensorSpec& spec);

}  // namespace torchfarm
