// The one bound on how many workers a model may have. The config's instance "count" (each entry
// and their sum per model), "count": "auto" once resolved, a reload and the admin `scale` command
// all check it here, so a farm cannot be scaled past what its config may say (README
// "Configuration", docs/operations.md "Limits").
//
// Owns nothing; pure functions, safe on any thread.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace torchfarm {

// Workers of one model (all its instance entries together), per loaded version.
inline constexpr int kMaxWorkersPerModel = 1024;

// OK for 0..kMaxWorkersPerModel; else "WHERE: expected an integer in 0..1024 (workers of one
// model), got COUNT".
Status CheckWorkerCount(int64_t count, const std::string& where);

}  // namespace torchfarm
