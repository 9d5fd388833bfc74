// The load generator's lean view of wire protocol v1 (docs/protocol.md): request headers built from
// a template and reply headers scanned for the few fields a benchmark needs, without a full JSON
// parse on the hot path. Anything the scanner does not recognise falls back to nlohmann::json, so
// a reply in another valid layout still counts correctly; it is only slower.
//
// Owns: nothing at run time (a template string and pure functions). Used by `torchfarm bench` on
// its generator threads and by its echo server, and benchmarked in bench/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/shm_reference.h"
#include "common/tensor_spec.h"

namespace torchfarm {

// Where one shared-memory request's tensors lie (`torchfarm bench --shm`): input k at
// input_offsets[k] of region output.region, the outputs in the range `output`.
struct ShmPlacement {
  std::vector<uint64_t> input_offsets;
  ShmRef output;
};

// Frame 0 of a request for one model and fixed input specs; only the id changes per request.
// What a request adds to its template: the header's timeout_ms and deadline_unix_us (0: left out).
struct RequestExtras {
  int64_t timeout_ms = 0;
  int64_t deadline_unix_us = 0;
};

class RequestTemplate {
 public:
  RequestTemplate(const std::string& model, const std::vector<TensorSpec>& inputs);
  // The same with every input in shared memory and "output_shm" (the request has no data frames).
  RequestTemplate(const std::string& model, const std::vector<TensorSpec>& inputs,
                  const ShmPlacement& shm);
  // {"v":1,"id":<id>[,"timeout_ms":T][,"deadline_unix_us":D],"model":…,"inputs":[…]}
  std::string Build(uint64_t id, const RequestExtras& extras = {}) const;
  // The same into `out`; returns the length, or 0 when it needs more than `capacity` bytes.
  size_t BuildInto(uint64_t id, char* out, size_t capacity, const RequestExtras& extras = {}) const;

 private:
  std::string prefix_;  // up to and including "id":
  std::string suffix_;  // from the comma after the id to the closing brace
};

// What a benchmark reads from a reply header.
struct ScannedReply {
  uint64_t id = 0;        // 0: no usable numeric id
  bool ok = false;        // "status": "ok"
  std::string code;       // error replies: the status code name; "MALFORMED_REPLY" when unreadable
  int64_t queue_us = -1;  // timing_us fields of ok replies; -1 when absent
  int64_t compute_us = -1;
  int64_t total_us = -1;
};

// Fast path for the compact layout the supervisor writes; falls back to a JSON parse otherwise.
ScannedReply ScanReply(std::string_view header);

// `--shm`: true when an ok reply header lists at least one output, each in shared memory inside
// `range` (region and byte range), as protocol.md places them. `*bytes`: the outputs' total size.
// A full JSON parse (the reply check is not on the frames path).
bool ShmOutputsInRange(std::string_view header, const ShmRef& range, uint64_t* bytes);

// The echo server's view of a request header: the raw text of its "id" value and of its
// "inputs" array, to be copied into the reply. False when the header needs a real parse.
bool ScanRequestForEcho(std::string_view header, std::string_view* id_text,
                        std::string_view* inputs_text);
// An ok reply whose outputs are the request's inputs (the echo's answer), in the supervisor's
// key order: {"id":…,"outputs":[…],"status":"ok","timing_us":{…},"v":1,"worker":-1}.
std::string MakeEchoReply(std::string_view id_text, std::string_view inputs_text);
// The echo's answer to a header the fast scan could not read: parsed with nlohmann::json; an
// error reply (INVALID_ARGUMENT) when it is not a valid request header.
std::string MakeEchoReplySlow(std::string_view header, bool* ok);

}  // namespace torchfarm
