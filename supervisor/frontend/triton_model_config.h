// The model configuration extension of the Open Inference Protocol as Triton answers it
// (GET /v2/models/{name}[/versions/{v}]/config): Triton's ModelConfig message in JSON, derived
// from the farm's model entry, so perf_analyzer and tritonclient's get_model_config() read what
// they read from Triton.
//
// Owns: the mapping. A model whose every input's shape starts with -1 batches: Triton's
// max_batch_size is the farm's and `dims` leave the batch dimension out (inputs and outputs);
// otherwise max_batch_size is 0 and `dims` are the whole shapes. data_type is "TYPE_" + the v2
// datatype (TYPE_FP32, TYPE_INT64, ...). dynamic_batching (when the farm merges requests:
// max_batch_size > 1) carries max_queue_delay_microseconds, preferred_batch_size,
// priority_levels, default_priority_level and default_queue_policy.max_queue_size;
// instance_group one entry per instance group (KIND_CPU, or KIND_GPU with its gpus). Pure, on
// front-end threads.
#pragma once

#include <nlohmann/json.hpp>

namespace torchfarm {

// `model` is one entry of the loop's "meta" reply (ModelMetadataJson, with "scheduling").
nlohmann::json TritonModelConfigJson(const nlohmann::json& model);

}  // namespace torchfarm
