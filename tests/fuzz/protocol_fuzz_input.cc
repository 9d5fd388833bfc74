#include "protocol_fuzz_input.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/protocol.h"
#include "ipc/shm_layout.h"
#include "supervisor/intake/job_intake.h"

namespace torchfarm::fuzz {

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz invariant broken: %s: %s\n", what, detail.c_str());
  std::abort();
}

const std::vector<ModelConfig>& Models() {
  static const std::vector<ModelConfig> models = [] {
    ModelConfig mlp;
    mlp.name = "mlp";
    mlp.inputs = {TensorSpec{DType::kFloat32, {-1, 4}}};
    mlp.slot_bytes = 4096;
    ModelConfig pair;
    pair.name = "pair";
    pair.inputs = {TensorSpec{DType::kFloat32, {-1, 2}}, TensorSpec{DType::kInt64, {-1}}};
    pair.slot_bytes = 1 << 20;
    ModelConfig any;
    any.name = "any";
    any.inputs = {TensorSpec{DType::kUInt8, {-1, -1, -1}}};
    any.slot_bytes = 1 << 16;
    return std::vector<ModelConfig>{mlp, pair, any};
  }();
  return models;
}

std::vector<std::string_view> SplitFrames(std::string_view text) {
  std::vector<std::string_view> frames;
  while (true) {
    size_t at = text.find(kFrameSeparator);
    frames.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return frames;
    text.remove_prefix(at + kFrameSeparator.size());
  }
}

// Whatever the header fast path accepts, the JSON parser must accept with the same result.
void CheckFastPath(std::string_view header, const RequestLimits& limits) {
  RequestHeader fast, full;
  if (!ParseRequestHeaderFast(header, &fast, limits)) return;
  Status s = ParseRequestHeaderJson(header, &full, limits);
  if (!s.ok()) Fail("fast path accepted what the JSON parser refuses", s.message());
  if (fast.id != full.id || fast.id.type() != full.id.type() || fast.model != full.model ||
      fast.version != full.version || !(fast.inputs == full.inputs) ||
      fast.input_names != full.input_names || fast.timeout_ms != full.timeout_ms ||
      fast.deadline_unix_us != full.deadline_unix_us || fast.priority != full.priority) {
    Fail("fast path and JSON parser disagree", std::string(header.substr(0, 200)));
  }
}

// The same for a reply header (the front ends' channel reads replies with the fast scan first):
// whatever ParseReplyHeaderFast accepts, ParseReplyHeaderJson reads the same.
void CheckReplyFastPath(std::string_view header) {
  ReplyHeader fast, full;
  if (!ParseReplyHeaderFast(header, &fast)) return;
  Status s = ParseReplyHeaderJson(header, &full);
  if (!s.ok()) Fail("reply fast path accepted what the JSON parser refuses", s.message());
  if (fast.id != full.id || fast.id.type() != full.id.type() || !full.status.ok() ||
      !(fast.outputs == full.outputs) || fast.output_names != full.output_names ||
      !full.output_shm.empty() || fast.timing.queue_us != full.timing.queue_us ||
      fast.timing.compute_us != full.timing.compute_us ||
      fast.timing.total_us != full.timing.total_us ||
      fast.timing.decode_us != full.timing.decode_us ||
      fast.timing.preprocess_us != full.timing.preprocess_us ||
      fast.timing.postprocess_us != full.timing.postprocess_us ||
      fast.worker_id != full.worker_id) {
    Fail("reply fast path and JSON parser disagree", std::string(header.substr(0, 200)));
  }
}

void Check(std::string_view input, const RequestLimits& limits) {
  CheckFastPath(SplitFrames(input)[0], limits);
  CheckReplyFastPath(SplitFrames(input)[0]);
  std::vector<zmq::message_t> frames;
  frames.emplace_back(std::string("fuzz-client"));
  for (std::string_view frame : SplitFrames(input)) frames.emplace_back(frame.data(), frame.size());
  std::vector<size_t> data_sizes;
  for (size_t i = 2; i < frames.size(); ++i) data_sizes.push_back(frames[i].size());

  PendingRequest request;
  size_t payload = 0;
  if (!SplitEnvelope(frames, &request, &payload)) Fail("SplitEnvelope", "refused an identity");
  size_t model = Models().size();
  Status s = ParseJob(frames, payload, Models(), TimePoint{}, &request, &model, limits);

  // The refusal the supervisor would send must itself be a valid reply echoing the id.
  std::string reply = s.ok() ? std::string() : MakeErrorReply(request.id, s);
  if (!s.ok()) {
    ReplyHeader parsed;
    if (!ParseReplyHeader(reply, &parsed).ok() || parsed.status.code() != s.code()) {
      Fail("error reply does not parse back", reply.substr(0, 200));
    }
    if (s.message().empty()) Fail("error without a message", reply.substr(0, 200));
    return;
  }
  if (model >= Models().size()) Fail("accepted without a model", "");
  const ModelConfig& config = Models()[model];
  if (request.inputs.size() != config.inputs.size() || request.frames.size() != data_sizes.size() ||
      request.inputs.size() > limits.max_inputs) {
    Fail("accepted with a wrong input count", std::to_string(request.inputs.size()));
  }
  uint64_t total = 0;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    auto bytes = ByteSize(request.inputs[i]);
    if (!bytes || *bytes != request.frames[i].size() || *bytes > limits.max_tensor_bytes ||
        request.inputs[i].shape.size() > static_cast<size_t>(limits.max_rank)) {
      Fail("accepted a frame that does not match its spec", SpecToString(request.inputs[i]));
    }
    total = ipc::AlignUp(total + *bytes, ipc::kTensorAlignment);
  }
  if (request.slot_bytes != total || total > config.slot_bytes) {
    Fail("slot bytes", std::to_string(request.slot_bytes));
  }
  if (request.rows < 1 || (request.batchable && request.rows != request.inputs[0].shape[0])) {
    Fail("rows", std::to_string(request.rows));
  }
}

// Bad input, then good input: after whatever came before, a well-formed request still parses to
// what it says (no parser may keep state from a refused request).
void CheckGoodStillParses() {
  static const std::string header =
      R"({"v":1,"id":7,"model":"mlp","inputs":[{"dtype":"float32","shape":[2,4]}]})";
  std::vector<zmq::message_t> frames;
  frames.emplace_back(std::string("fuzz-client"));
  frames.emplace_back(header.data(), header.size());
  frames.emplace_back(std::string(32, '\0'));
  PendingRequest request;
  size_t payload = 0;
  if (!SplitEnvelope(frames, &request, &payload)) Fail("good request", "SplitEnvelope refused it");
  size_t model = Models().size();
  Status s = ParseJob(frames, payload, Models(), TimePoint{}, &request, &model, RequestLimits{});
  if (!s.ok()) Fail("a good request after a bad one", s.message());
  if (model != 0 || request.rows != 2 || request.id != 7) Fail("a good request", "parsed wrong");
}

}  // namespace

void RunProtocolInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  Check(input, RequestLimits{});
  CheckGoodStillParses();
  RequestLimits tight;
  tight.max_header_bytes = 512;
  tight.max_inputs = 2;
  tight.max_rank = 3;
  tight.max_tensor_bytes = 64;
  tight.max_request_bytes = 600;
  Check(input, tight);
}

}  // namespace torchfarm::fuzz
