// The front ends' side of the v2 model repository extension (docs/kserve-v2.md, "Model
// repository"): POST /v2/repository/index, POST /v2/repository/models/{m}/load|unload and gRPC's
// RepositoryIndex / RepositoryModelLoad / RepositoryModelUnload.
//
// Owns: reading the HTTP bodies ({"ready": bool} for the index; {"parameters": {...}} for load
// and unload, where Triton's "config" and "file:..." overrides are refused: the farm loads its
// config file's entry), the farm calls (kMetaTag queries the loop answers with
// supervisor/admin/repository_api.h) and the wait: a load or unload the loop started is polled
// through the index every kRepositoryPollMs until the model is READY (load) or no longer
// UNLOADING (unload), as `torchfarm ctl load/unload` waits, at most kRepositoryWaitMs. Also the
// logging extension's calls (GET/POST /v2/logging, gRPC LogSettings), which ask the loop the same
// way (supervisor/admin/log_settings.h). Runs on a FarmChannel's thread; `done` runs there, exactly
// once while the channel runs.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "supervisor/frontend/farm_channel.h"
#include "supervisor/frontend/http_v2_handler.h"

namespace torchfarm {

inline constexpr int kRepositoryPollMs = 50;
inline constexpr int kRepositoryWaitMs = 300'000;

// The HTTP body of an index call (empty: {}), into `ready`; INVALID_ARGUMENT naming the field.
Status ParseRepositoryIndexBody(std::string_view body, bool* ready);
// The HTTP body of a load or unload call (empty: {}); refuses parameters the farm cannot honour.
Status ParseRepositoryControlBody(std::string_view body);
// A load/unload parameter's name: refused when it asks for what the farm does not do.
Status CheckRepositoryParameter(const std::string& name);

// `done(status, models)`: the index's [{"name", "version", "state", "reason"}].
void RepositoryIndexCall(FarmChannel& channel, bool ready_only,
                         std::function<void(Status, nlohmann::json)> done);
// `load`: true to load `model`, false to unload it; `done` once it is finished (or refused).
void RepositoryControlCall(FarmChannel& channel, bool load, const std::string& model,
                           std::function<void(Status)> done);

// `settings` (empty: only read them) sent to the loop; `done(status, settings now)`.
void LogSettingsCall(FarmChannel& channel, nlohmann::json settings,
                     std::function<void(Status, nlohmann::json)> done);

// The HTTP routes' answers (http_v2_handler.cc dispatches kRepository* and kLogging here).
void HandleRepositoryHttp(const V2Target& target, const std::string& body, FarmChannel& channel,
                          std::function<void(V2HttpAnswer)> done);

}  // namespace torchfarm
