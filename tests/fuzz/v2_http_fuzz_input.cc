// The v2 HTTP request fuzzer's body (v2_http_fuzz_input.h).
#include "v2_http_fuzz_input.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/tensor_spec.h"
#include "supervisor/frontend/content_encoding.h"
#include "supervisor/frontend/frontend_tag.h"
#include "supervisor/frontend/v2_classification.h"
#include "supervisor/frontend/v2_client_id.h"
#include "supervisor/frontend/v2_http_codec.h"
#include "supervisor/frontend/v2_inference.h"
#include "supervisor/frontend/v2_request_scanner.h"

namespace torchfarm::fuzz {
namespace {

[[noreturn]] void Broken(const std::string& what) {
  std::fprintf(stderr, "v2 http fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

void CheckAccepted(V2InferRequest& request) {
  if (request.inputs.empty()) Broken("accepted a request without inputs");
  V2InferResponse response;
  response.model = "m";
  response.version = "1";
  response.id = request.id;
  for (const V2Tensor& input : request.inputs) {
    DType dtype;
    if (!DTypeFromV2(input.datatype, "fuzz", &dtype).ok()) {
      Broken("accepted datatype " + input.datatype);
    }
    const std::optional<uint64_t> bytes = ByteSize(TensorSpec{dtype, input.shape});
    // An input in system shared memory has no bytes here; ToFarmRequest checks its byte size.
    if (!bytes || (!input.shm.used() && *bytes != input.data.size())) {
      Broken("input bytes disagree with its shape");
    }
    if (input.shm.used() && (input.data.size() != 0 || input.shm.byte_size == 0)) {
      Broken("an input in shared memory with data, or without a byte size");
    }
    V2Tensor copy;
    copy.name = input.name;
    copy.datatype = input.datatype;
    copy.shape = input.shape;
    copy.data.copy(const_cast<zmq::message_t&>(input.data));
    // Every third output as a classification (issue 30): top-k strings whose count the shape says.
    if (response.outputs.size() % 3 == 2) {
      const Status classified =
          ClassifyOutput(1 + static_cast<int64_t>(input.data.size() % 7), &copy);
      if (classified.ok() != !input.shape.empty())
        Broken("classification: " + classified.ToString());
      uint64_t items = 1;
      for (int64_t d : copy.shape) items *= static_cast<uint64_t>(d);
      if (classified.ok() && BytesDataJson(copy).size() != items) Broken("classification items");
    }
    response.outputs.push_back(std::move(copy));
    response.binary.push_back(response.outputs.size() % 2 == 0);
  }
  const V2HttpBody body = WriteV2InferResponse(response);
  const std::string_view text =
      std::string_view(body.bytes).substr(0, body.json_bytes.value_or(body.bytes.size()));
  if (!nlohmann::json::accept(text)) Broken("response JSON does not parse");
  nlohmann::json header;
  std::vector<zmq::message_t> frames;
  const Status s = ToFarmRequest(request, RequestLimits{}, &header, &frames);
  if (!s.ok() && s.code() != StatusCode::kInvalidArgument) {
    Broken("ToFarmRequest: " + s.ToString());
  }
  size_t in_shm = 0;
  for (const auto& input : header["inputs"]) in_shm += input.contains("shm") ? 1 : 0;
  if (s.ok() && frames.size() != header["inputs"].size() - in_shm) Broken("frame count");
}

bool SameShm(const V2ShmPlace& a, const V2ShmPlace& b) {
  return a.region == b.region && a.offset == b.offset && a.byte_size == b.byte_size;
}

bool SameTensor(const V2Tensor& a, const V2Tensor& b) {
  return a.name == b.name && a.datatype == b.datatype && a.shape == b.shape &&
         SameShm(a.shm, b.shm) && a.data.size() == b.data.size() &&
         (a.data.size() == 0 || std::memcmp(a.data.data(), b.data.data(), a.data.size()) == 0);
}

bool SameRequest(const V2InferRequest& a, const V2InferRequest& b) {
  if (a.id != b.id || a.binary_outputs != b.binary_outputs || a.timeout_ms != b.timeout_ms ||
      a.priority != b.priority ||
      std::memcmp(&a.client_weight, &b.client_weight, sizeof(double)) != 0 ||
      a.inputs.size() != b.inputs.size() || a.outputs.size() != b.outputs.size()) {
    return false;
  }
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    if (!SameTensor(a.inputs[i], b.inputs[i])) return false;
  }
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    const V2RequestedOutput& x = a.outputs[i];
    const V2RequestedOutput& y = b.outputs[i];
    if (x.name != y.name || x.binary != y.binary || x.class_count != y.class_count ||
        !SameShm(x.shm, y.shm)) {
      return false;
    }
  }
  return true;
}

// The scanner (v2_request_scanner.h) against the DOM path: when it takes a body, the DOM path
// takes it too and reads the very same request; when it gives up, it leaves the request alone.
void CheckFastPathAgrees(const std::shared_ptr<const std::string>& body, size_t json_bytes) {
  V2InferRequest fast, dom;
  fast.id = dom.id = "untouched";  // a body without "id" leaves it in both
  const bool took = ParseV2InferRequestFast(body, json_bytes, &fast);
  const Status s = ParseV2InferRequestJson(body, json_bytes, &dom);
  if (!took) {
    if (fast.id != "untouched" || !fast.inputs.empty() || !fast.outputs.empty()) {
      Broken("the fast path gave up but changed the request");
    }
    return;
  }
  if (!s.ok()) Broken("the fast path took a body the DOM path refuses: " + s.ToString());
  if (!SameRequest(fast, dom)) Broken("the fast path read a body differently from the DOM path");
}

// Bad input, then good input: a well-formed request parses to what it says after anything.
void CheckGoodV2StillParses() {
  static const std::string text =
      R"({"id":"g","inputs":[{"name":"x","datatype":"FP32","shape":[1,2],"data":[1.5,2.5]}]})";
  auto body = std::make_shared<const std::string>(text);
  V2InferRequest request;
  const Status s = ParseV2InferRequest(body, text.size(), &request);
  if (!s.ok()) Broken("a good request after a bad one: " + s.ToString());
  if (request.inputs.size() != 1 || request.inputs[0].data.size() != 8) {
    Broken("a good request after a bad one parsed wrong");
  }
}

// The input as a compressed body: refused with 400/413 and a message, or decoded within the
// bound. Returns the decoded bytes of the first coding that takes it, or nothing.
std::optional<std::string> DecodeAsCompressed(std::string_view input) {
  std::optional<std::string> decoded;
  for (const char* coding : {"gzip", "deflate"}) {
    std::string out;
    const DecodedBody result = DecodeContentEncoding(coding, input, kFuzzMaxDecodedBytes, &out);
    if (out.size() > kFuzzMaxDecodedBytes) Broken(std::string(coding) + " decoded past the bound");
    if (result.status.ok()) {
      if (!decoded) decoded = std::move(out);
      continue;
    }
    if ((result.http_status != 400 && result.http_status != 413) ||
        result.status.message().empty()) {
      Broken(std::string(coding) +
             ": a refusal must be 400 or 413 with a message: " + result.status.ToString());
    }
  }
  return decoded;
}

void RunV2Body(std::string input);

// The input's first line as a frontend.client_id_header value, and its first two lines as two
// values: refused INVALID_ARGUMENT naming the header, or a tag that reads back to that id.
void CheckClientIdValues(std::string_view input) {
  const std::string_view first = input.substr(0, input.find('\n'));
  std::string tag;
  const Status one = V2RequestTag(RequestOrigin::kHttp, "127.0.0.1:1", "x-tenant", {first}, &tag);
  if (one.ok()) {
    if (first.empty() || first.size() > kMaxClientIdBytes) Broken("accepted a client id's size");
    for (char c : first) {
      if (c < 0x21 || c > 0x7e) Broken("accepted a client id byte that is not visible ASCII");
    }
    const FrontendTagParts parts = ReadFrontendTag(tag);
    if (parts.client != first || parts.origin != RequestOrigin::kHttp) Broken("tag read back");
  } else if (one.code() != StatusCode::kInvalidArgument ||
             one.message().rfind("x-tenant: ", 0) != 0) {
    Broken("a client id refusal must be INVALID_ARGUMENT naming the header: " + one.ToString());
  }
  if (V2RequestTag(RequestOrigin::kGrpc, "ipv4:1", "x-tenant", {first, first}, &tag).ok()) {
    Broken("accepted two client id values");
  }
}

}  // namespace

void RunV2HttpInput(const uint8_t* data, size_t size) {
  CheckGoodV2StillParses();  // also after the previous input, whatever it was
  std::string input(reinterpret_cast<const char*>(data), size);
  CheckClientIdValues(input);
  if (std::optional<std::string> decoded = DecodeAsCompressed(input)) {
    RunV2Body(std::move(*decoded));
  }
  RunV2Body(std::move(input));
}

namespace {

void RunV2Body(std::string input) {
  const size_t size = input.size();
  const size_t end = input.find(kV2JsonEnd);
  const size_t json_bytes = end == std::string::npos ? size : end;
  if (end != std::string::npos) input.erase(end, kV2JsonEnd.size());
  auto body = std::make_shared<const std::string>(std::move(input));
  CheckFastPathAgrees(body, json_bytes);
  V2InferRequest request;
  const Status s = ParseV2InferRequest(body, json_bytes, &request);
  if (!s.ok()) {
    if (s.code() != StatusCode::kInvalidArgument || s.message().empty()) {
      Broken("a refusal must be INVALID_ARGUMENT with a message: " + s.ToString());
    }
    if (!nlohmann::json::accept(V2ErrorBody(s.message()))) Broken("error body is not JSON");
    return;
  }
  CheckAccepted(request);
  size_t parsed;
  (void)ParseInferenceHeaderLength(std::string_view(*body).substr(0, 24), body->size(), &parsed);
}

}  // namespace
}  // namespace torchfarm::fuzz
