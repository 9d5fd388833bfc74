// The parts of Triton's system shared memory extension that are pure parsing and policy
// (docs/kserve-v2.md, "System shared memory"), shared by the HTTP codec, the gRPC service, the
// HTTP routes (v2_system_shm.h) and the fuzzer.
//
// Owns: the shared-memory parameter parser (HTTP's JSON parameters and gRPC's InferParameter map,
// converted to the same JSON), the register body's format, and who may use the extension (the
// config key frontend.system_shared_memory, and then loopback clients only: 127.0.0.0/8, ::1,
// unix sockets). Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "supervisor/frontend/v2_inference.h"

namespace torchfarm {

// Reads Triton's shared-memory parameters from a tensor's `params` object: "shared_memory_region"
// (a non-empty string), "shared_memory_byte_size" (required with it, 1..2^62),
// "shared_memory_offset" (optional, 0..2^62). *out stays unused when no "shared_memory_region" is
// there; an offset or byte size without a region is INVALID_ARGUMENT. Errors name
// `where` + ".parameters.<key>", what was expected and what came.
Status ParseV2ShmParameters(const nlohmann::json& params, const std::string& where,
                            V2ShmPlace* out);

// "127.0.0.1:5000", "[::1]:5000", "ipv4:127.0.0.1:5000", "ipv6:[::1]:5000", "unix:/path":
// a client on this host's loopback (or a unix socket).
bool IsLoopbackPeer(std::string_view peer);

// OK when `peer` may use the extension; else the refusal naming frontend.system_shared_memory
// (off) or the peer (not loopback), with `code` as its status code.
Status SystemShmAllowed(bool enabled, const std::string& peer, StatusCode code);
// For an inference request: OK when it names no region, else SystemShmAllowed (INVALID_ARGUMENT).
Status CheckV2ShmAllowed(const V2InferRequest& request, bool enabled, const std::string& peer);

// The register call's HTTP body {"key": "/name", "offset": N, "byte_size": N} (offset optional).
Status ParseSystemShmRegisterBody(std::string_view body, std::string* key, uint64_t* offset,
                                  uint64_t* byte_size);

}  // namespace torchfarm
