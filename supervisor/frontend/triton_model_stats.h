// The statistics extension of the Open Inference Protocol as Triton answers it
// (GET /v2/models/stats, /v2/models/{name}[/versions/{v}]/stats): Triton's
// ModelStatisticsResponse in JSON, from the counters the farm keeps per model version
// (ModelStats::Totals, passed by the loop as each meta entry's "statistics").
//
// Owns: the mapping. inference_count is the rows run, execution_count the batches; in
// inference_stats, success is the answered requests with their total time, fail the errors,
// queue and compute_infer the answered requests with the time queued and computing (the farm
// does not split input and output copies from compute: compute_input and compute_output count
// the requests with 0 ns); cache_hit and cache_miss are 0 (no response cache); batch_stats is
// empty (no per-batch-size counters). Times are ns, last_inference ms since the epoch. Pure, on
// front-end threads.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace torchfarm {

// {"model_stats": [...]} for the entries of a "meta" reply (with "statistics") that `name` and
// `version` pick: every entry when `name` is empty, every version of `name` when `version` is
// empty, else that one. NOT_FOUND (ModelNotServed / VersionNotLoaded) for a name or version that
// is not served.
Status TritonModelStatsJson(const nlohmann::json& meta, const std::string& name,
                            const std::string& version, nlohmann::json* out);

}  // namespace torchfarm
