// A served model's metadata as the Open Inference Protocol describes it (docs/kserve-v2.md):
// name, versions, platform, and each input and output with name, datatype and shape (-1 for a
// variable dimension).
//
// Owns: where that comes from. Inputs: the config's `inputs` (names default to INPUT__0...).
// Outputs: the config's `outputs` when given; otherwise what the model returned (learned by the
// supervisor from the worker's warm-up report or from the first batch it answered, with dim 0
// written -1 when the model batches); until then an empty list. Loop thread only.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "supervisor/models/served_model.h"

namespace torchfarm {

// {"name": ..., "version": this one, "versions": `versions` (every loaded version of the name;
//  empty: this one), "platform": "pytorch_libtorch", "ready": ready,
//  "inputs": [{"name", "datatype", "shape"}], "outputs": [...], "scheduling": SchedulingJson}
nlohmann::json ModelMetadataJson(const ServedModel& model, bool ready,
                                 const std::vector<std::string>& versions = {});

// What the v2 model configuration (Triton's config.pbtxt as JSON, frontend/triton_model_config.h)
// is made of: {"max_batch_size", "max_queue_delay_us", "preferred_batch_sizes",
// "priority_levels", "default_priority_level", "max_queue_size",
// "instances": [{"device": "cpu" | "cuda:N", "count"}]}.
nlohmann::json SchedulingJson(const ModelConfig& config);

// Records `outputs` (what a batch or a warm-up returned) as the model's learned outputs, unless
// they were learned already for its current path. Dim 0 becomes -1 when max_batch_size > 1.
void LearnOutputs(ServedModel* model, const std::vector<TensorSpec>& outputs);

// One tensor as metadata lists it: {"name", "datatype" (FP32...), "shape"}.
nlohmann::json TensorMetadataJson(const std::string& name, const TensorSpec& spec);

}  // namespace torchfarm
