// The fast path of the v2 HTTP infer request parser (v2_http_codec.h, issue 36): one pass over the
// JSON part of a body straight into V2InferRequest, JSON tensor numbers read with std::from_chars
// into the tensor's own bytes, no DOM.
//
// Owns: nothing but the scan; the format and its errors stay with ParseV2InferRequestJson, the
// DOM path. Like ParseRequestHeaderFast (common/protocol.h) it returns true only for a request it
// fully read and found valid, with exactly the V2InferRequest the DOM path gives. Anything else
// returns false with *out untouched, and the DOM path decides and words the error: every error,
// strings with escapes or non-ASCII bytes, a repeated key, a key it does not know where the DOM
// path checks keys, an integer past 64 bits, a float past a double, a "data" array longer than the
// JSON text could hold, more than kMaxScannedOutputs outputs. Runs on the HTTP front end's threads
// (and in the fuzzer); pure, no state.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "supervisor/frontend/v2_inference.h"

namespace torchfarm {

// Past this many requested outputs the name check would be quadratic: the DOM path takes them.
inline constexpr size_t kMaxScannedOutputs = 64;

// ParseV2InferRequest's fast half: same arguments, same result on true (id, parameters, inputs
// replaced, outputs appended, as the DOM path leaves them); false leaves *out as it was.
bool ParseV2InferRequestFast(const std::shared_ptr<const std::string>& body, size_t json_bytes,
                             V2InferRequest* out);

}  // namespace torchfarm
