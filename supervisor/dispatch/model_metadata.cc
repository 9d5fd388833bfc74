#include "supervisor/dispatch/model_metadata.h"

#include "common/dtype.h"

namespace torchfarm {

using nlohmann::json;

json TensorMetadataJson(const std::string& name, const TensorSpec& spec) {
  return json{
      {"name", name}, {"datatype", std::string(V2DatatypeName(spec.dtype))}, {"shape", spec.shape}};
}

json ModelMetadataJson(const ServedModel& model, bool ready,
                       const std::vector<std::string>& versions) {
  const ModelConfig& config = model.config;
  json inputs = json::array();
  for (size_t k = 0; k < config.inputs.size(); ++k) {
    inputs.push_back(TensorMetadataJson(config.input_name(k), config.inputs[k]));
  }
  // Declared outputs win; learned ones count only for the model file they came from.
  const bool learned =
      !model.outputs_learned_for.empty() && model.outputs_learned_for == config.path;
  static const std::vector<TensorSpec> kNone;
  const std::vector<TensorSpec>* specs = &kNone;
  if (!config.outputs.empty()) {
    specs = &config.outputs;
  } else if (learned) {
    specs = &model.learned_outputs;
  }
  json outputs = json::array();
  for (size_t k = 0; k < specs->size(); ++k) {
    outputs.push_back(TensorMetadataJson(config.output_name(k), (*specs)[k]));
  }
  return json{{"name", config.name},
              {"version", config.version},
              {"versions", versions.empty() ? json::array({config.version}) : json(versions)},
              {"platform", "pytorch_libtorch"},
              {"ready", ready},
              {"inputs", std::move(inputs)},
              {"outputs", std::move(outputs)},
              {"scheduling", SchedulingJson(config)}};
}

json SchedulingJson(const ModelConfig& config) {
  json instances = json::array();
  for (const InstanceConfig& group : config.instances) {
    instances.push_back({{"device", group.device}, {"count", group.count}});
  }
  return {{"max_batch_size", config.max_batch_size},
          {"max_queue_delay_us", config.max_queue_delay_us},
          {"preferred_batch_sizes", config.preferred_batch_sizes},
          {"priority_levels", config.priority_levels},
          {"default_priority_level", config.default_priority_level},
          {"max_queue_size", config.max_queue_size},
          {"instances", std::move(instances)}};
}

void LearnOutputs(ServedModel* model, const std::vector<TensorSpec>& outputs) {
  if (model->outputs_learned_for == model->config.path) return;
  model->learned_outputs = outputs;
  if (model->config.max_batch_size > 1) {
    // A batch's dim 0 is its rows, which vary from batch to batch.
    for (TensorSpec& spec : model->learned_outputs) {
      if (!spec.shape.empty()) spec.shape[0] = -1;
    }
  }
  model->outputs_learned_for = model->config.path;
}

}  // namespace torchfarm
