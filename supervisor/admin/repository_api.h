// The loop's side of the v2 model repository extension (docs/kserve-v2.md, "Model repository"):
// what POST /v2/repository/index, /v2/repository/models/{m}/load|unload and gRPC's
// RepositoryIndex / RepositoryModelLoad / RepositoryModelUnload ask of the farm, answered on the
// loop thread from the front ends' "meta" queries (frontend/farm_channel.h).
//
// Owns: the index (every served version, failed load, and config-file entry not loaded, each with
// Triton's state READY / LOADING / UNLOADING / UNAVAILABLE and a reason), the name checks (no '/',
// no "..", not empty), and mapping load/unload onto ModelControl exactly as the admin socket's
// `load`/`unload` do (the config file's entry, the same refusals). It starts a load or an unload
// and returns; the front end waits by polling the index (frontend/v2_repository.h). Refused, with
// the key to set, unless frontend.model_control is true. Loop thread only.
#pragma once

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "supervisor/admin/farm_status.h"
#include "supervisor/models/model_control.h"

namespace torchfarm {

class RepositoryApi {
 public:
  RepositoryApi(const FarmConfig& config, const FarmStatus& status, ModelControl& control,
                const ModelTable& models)
      : config_(config), status_(status), control_(control), models_(models) {}

  // `query` is {"repository": "index", ["model": NAME], ["ready": true]} or
  // {"repository": "load" | "unload", "model": NAME}. Index: {"models": [{"name", "version",
  // "state", "reason"}]} (only NAME's entries when given; only READY ones with "ready").
  // Load/unload: {"started": bool} (false: nothing to wait for: loaded already / not loaded).
  // A refusal is {"status": "error", "code", "message"} (the wire protocol's error reply).
  nlohmann::json Answer(const nlohmann::json& query);

 private:
  nlohmann::json Index(const std::string& model, bool ready_only) const;
  Status Load(const std::string& name, bool* started);
  Status Unload(const std::string& name, bool* started);
  // Every model entry of the config file (empty when it cannot be read now).
  std::vector<ModelConfig> ConfigFileModels() const;

  const FarmConfig& config_;
  const FarmStatus& status_;
  ModelControl& control_;
  const ModelTable& models_;
};

// OK for a name a repository call may use; INVALID_ARGUMENT naming it otherwise.
Status CheckRepositoryModelName(const std::string& name);

}  // namespace torchfarm
