// The front ends' side of Triton's system shared memory extension (docs/kserve-v2.md, "System
// shared memory"): GET /v2/systemsharedmemory[/region/{r}]/status,
// POST /v2/systemsharedmemory/region/{r}/register, POST /v2/systemsharedmemory[/region/{r}]/
// unregister, gRPC's SystemSharedMemoryStatus / Register / Unregister, and the tensors'
// shared_memory_region / _offset / _byte_size parameters.
//
// Owns: the farm calls (kMetaTag queries the loop answers with
// supervisor/intake/system_shm_api.h). Runs on a FarmChannel's thread (calls) or any (parsers).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "supervisor/frontend/farm_channel.h"
#include "supervisor/frontend/http_v2_handler.h"
#include "supervisor/frontend/v2_inference.h"
#include "supervisor/frontend/v2_shm_parameters.h"

namespace torchfarm {

// A query {"system_shared_memory": op, ...} to the loop; `done(status, answer)`.
void SystemShmCall(FarmChannel& channel, nlohmann::json query,
                   std::function<void(Status, nlohmann::json)> done);

// The HTTP routes kSystemShm* (`target.model` holds the region name, empty: all).
void HandleSystemShmHttp(const V2Target& target, const std::string& body, const std::string& peer,
                         bool enabled, FarmChannel& channel,
                         std::function<void(V2HttpAnswer)> done);

}  // namespace torchfarm
