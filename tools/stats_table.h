// The plain text of the admin replies: what `torchfarm stats` prints (a supervisor line, a table
// of models, a table of workers) and what `torchfarm ctl health` prints.
//
// Owns: nothing; pure functions of the admin replies (docs/operations.md), so they are
// unit-tested without a farm. Fields a reply lacks print as "-".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace torchfarm {

// Lines without trailing newlines and without escapes; column widths fit the widest cell.
std::vector<std::string> RenderStatsTable(const nlohmann::json& stats);

// The models with a latency objective (docs/scheduling.md), one row each: the SLO, goodput (OK
// answers within it per second over the last 60 s), OK answers within and after it, requests
// refused or shed for it, the share within, the mean batch size and the batch sizes sent
// ("<=1:12 <=4:300 <=8:1500": batches by rows). Empty when no model has an SLO. `torchfarm stats`
// and `torchfarm top` both show it.
std::vector<std::string> RenderSloTable(const nlohmann::json& models);

// A model's batch_sizes histogram as "<=1:12 <=2:5 <=4:300", or "-" without one.
std::string BatchSizesText(const nlohmann::json& model);

// The health reply: "live yes  ready no  draining no", then a MODEL/READY/WORKERS table.
std::vector<std::string> RenderHealthTable(const nlohmann::json& health);

// "cuda:0", or "cpu (fallback)" for a worker that fell back from its GPU; `compact` writes
// "cpu*" instead.
std::string DeviceText(const nlohmann::json& worker, bool compact);

}  // namespace torchfarm
