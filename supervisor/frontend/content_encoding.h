// Request bodies with a Content-Encoding (RFC 9110 section 8.4): what tritonclient sends with
// request_compression_algorithm="gzip" or "deflate", and what Triton decodes.
//
// Owns: the accepted codings (identity, gzip and its alias x-gzip, deflate: the zlib format of RFC
// 1950, as zlib.compress and Triton write it) and the bound on what a body may inflate to. The
// decoder never holds more than `max_bytes` plus one chunk: a zip bomb is refused as soon as its
// output passes the bound, whatever its headers or trailers claim. Pure functions with no state,
// on front-end threads and in the v2 fuzzer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace torchfarm {

// A decoded body, or why there is none: `http_status` 400 (a corrupt, truncated or trailing-
// garbage stream; INVALID_ARGUMENT), 413 (it inflates past max_bytes; RESOURCE_EXHAUSTED) or 415
// (a coding other than identity, gzip, x-gzip, deflate; INVALID_ARGUMENT). Messages name the
// coding, the limit and what was found.
struct DecodedBody {
  Status status;
  int http_status = 200;
};

// True when `content_encoding` (the header's value) asks for decoding: not empty and not
// "identity" (case-insensitive, spaces around it ignored).
bool NeedsContentDecoding(std::string_view content_encoding);

// Decodes `body` per `content_encoding` (one coding; "identity" or empty: a copy) into *out, at
// most `max_bytes` (frontend.max_body_bytes) long. Concatenated gzip members are read in turn,
// as gunzip does.
DecodedBody DecodeContentEncoding(std::string_view content_encoding, std::string_view body,
                                  uint64_t max_bytes, std::string* out);

}  // namespace torchfarm
