#include "supervisor/model_metadata.h"

// Placeholder until the named-tensor branch lands: inputs from the config, no outputs.
namespace torchfarm {

nlohmann::json ModelMetadataJson(const ServedModel& model, bool ready) {
  nlohmann::json inputs = nlohmann::json::array();
  for (size_t i = 0; i < model.config.inputs.size(); ++i) {
    inputs.push_back({{"name", "INPUT__" + std::to_string(i)},
                      {"datatype", DTypeName(model.config.inputs[i].dtype)},
                      {"shape", model.config.inputs[i].shape}});
  }
  return {{"name", model.config.name}, {"versions", {"1"}}, {"platform", "pytorch_libtorch"},
          {"ready", ready}, {"inputs", inputs}, {"outputs", nlohmann::json::array()}};
}

}  // namespace torchfarm
