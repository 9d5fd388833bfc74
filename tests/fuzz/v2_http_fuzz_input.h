// The body of the v2 HTTP request fuzzer, shared by the libFuzzer target (v2_http_fuzzer.cc, built
// with clang by `make fuzz`) and by the regression replay (fuzz_regression_test.cc).
//
// Input format: an HTTP infer request body. When it contains kV2JsonEnd, the bytes before it are
// the JSON part (Inference-Header-Content-Length) and the whole input is the body, so binary
// tensors follow the separator; otherwise the whole input is JSON. Every input runs through
// ParseV2InferRequest; an accepted one must hold consistent tensors, translate with ToFarmRequest
// or fail with INVALID_ARGUMENT, and its tensors written back as a response must be valid JSON.
// Every input is also decoded as a gzip and as a deflate Content-Encoding body
// (supervisor/frontend/content_encoding.h) with a kFuzzMaxDecodedBytes bound: the decoder answers
// 400 or 413 with a message, or bytes within the bound; an input that decodes is then parsed as
// the body it decodes to (seeds v2_corpus/gzip_* and deflate_*). Every third accepted input is
// also classified (v2_classification.h) as an output would be. Every body also runs through the
// fast path alone (ParseV2InferRequestFast, v2_request_scanner.h) and the DOM path alone
// (ParseV2InferRequestJson): when the fast path takes a body, the DOM path must take it too and
// read the same request, field by field and byte by byte. Any broken invariant aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace torchfarm::fuzz {

inline constexpr std::string_view kV2JsonEnd = "\n--\n";
inline constexpr uint64_t kFuzzMaxDecodedBytes = 1 << 20;

void RunV2HttpInput(const uint8_t* data, size_t size);

}  // namespace torchfarm::fuzz
