// Client shared-memory references in the wire protocol (docs/protocol.md, "Shared-memory tensors
// (same host)"): the `shm` object of an input, the request's `output_shm`, the `shm_create` and
// `shm_release` commands, where outputs land in an output range, and the replies that name them.
//
// Pure parsing and formatting, shared by the supervisor, the C++ client and the tests. Which
// regions exist, and whether a reference fits one, is the supervisor's business
// (supervisor/intake/client_shm_registry.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/tensor_spec.h"

namespace torchfarm {

// Output ranges hold each output at a multiple of this many bytes from the range's start.
inline constexpr uint64_t kShmOutputAlignment = 64;

// A place in a client region. `region` is the token shm_create returned; empty: not in shared
// memory (the tensor travels as a data frame).
struct ShmRef {
  std::string region;
  uint64_t offset = 0;
  uint64_t bytes = 0;  // output_shm only: the length of the range the outputs may fill
  bool used() const { return !region.empty(); }
};

// An output the v2 front ends place in a registered system shared-memory region (Triton's
// output parameters shared_memory_region/offset/byte_size; docs/kserve-v2.md "System shared
// memory"): header field "outputs_shm", [{"name", "region", "offset", "bytes"}], refused on the
// job socket. `ref.region` is the registered region's name, `ref.offset` counts from the start of
// the registered range, `ref.bytes` is shared_memory_byte_size.
struct OutputPlace {
  std::string name;
  ShmRef ref;
};
// At most this many entries in "outputs_shm" (a model has no more outputs than this).
inline constexpr size_t kMaxOutputPlaces = 64;

// Reads "outputs_shm"; errors name `where`.
Status OutputPlacesFromJson(const nlohmann::json& j, const std::string& where,
                            std::vector<OutputPlace>* out);
nlohmann::json OutputPlacesToJson(const std::vector<OutputPlace>& places);

enum class RequestOp { kInfer, kShmCreate, kShmRelease };

// Reads {"region": "<token>", "offset": N} (and "bytes" when `is_output`). Errors name `where`.
Status ShmRefFromJson(const nlohmann::json& j, const std::string& where, bool is_output,
                      ShmRef* out);
nlohmann::json ShmRefToJson(const ShmRef& ref, bool is_output);

// Reads "op" of a header object: absent or "infer" is an inference request.
Status RequestOpFromJson(const nlohmann::json& header, RequestOp* out);

// Offsets (absolute, in the region) at which `outputs` are written into `range`: the first at
// range.offset, each next one at the next multiple of kShmOutputAlignment after the previous.
// Fails with RESOURCE_EXHAUSTED, naming both sizes, when they do not fit in range.bytes.
Status PlaceOutputs(const std::vector<TensorSpec>& outputs, const ShmRef& range,
                    std::vector<uint64_t>* offsets);

// {"v":1,"id":…,"status":"ok","shm":{"region","name","bytes"}}: the answer to shm_create.
std::string MakeShmCreatedReply(const nlohmann::json& id, const std::string& region,
                                const std::string& name, uint64_t bytes);
// {"v":1,"id":…,"status":"ok"}: the answer to shm_release.
std::string MakeShmReleasedReply(const nlohmann::json& id);

}  // namespace torchfarm
