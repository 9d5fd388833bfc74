// The loop's side of Triton's system shared memory extension (docs/kserve-v2.md, "System shared
// memory"): what GET /v2/systemsharedmemory[/region/{r}]/status, POST .../region/{r}/register,
// POST /v2/systemsharedmemory[/region/{r}]/unregister and gRPC's SystemSharedMemoryStatus /
// Register / Unregister ask of the farm, answered on the loop thread from the front ends' "meta"
// queries (frontend/farm_channel.h) with the client regions' registry.
//
// Owns: the query's format and the answers' JSON. Refused, naming the key, unless
// frontend.system_shared_memory is true. Loop thread only.
#pragma once

#include <nlohmann/json.hpp>

#include "supervisor/intake/client_shm_registry.h"

namespace torchfarm {

// The query key that marks a system shared memory call among the "meta" queries.
inline constexpr const char* kSystemShmQuery = "system_shared_memory";

// `query` is {"system_shared_memory": "status", ["name": R]},
// {"system_shared_memory": "register", "name": R, "key": K, "offset": N, "byte_size": N} or
// {"system_shared_memory": "unregister", ["name": R]} (no name: every region). Status answers
// {"regions": [{"name", "key", "offset", "byte_size"}]}, the others {}; a refusal is the wire
// protocol's error reply {"status": "error", "code", "message"}. `registry` null or `enabled`
// false: UNAVAILABLE naming frontend.system_shared_memory.
nlohmann::json SystemShmAnswer(ClientShmRegistry* registry, bool enabled,
                               const nlohmann::json& query);

}  // namespace torchfarm
