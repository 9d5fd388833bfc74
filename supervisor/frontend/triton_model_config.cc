// Triton's model configuration JSON (triton_model_config.h). Triton writes its int64 fields
// (dims, delays) as JSON numbers in this response, and so does this.
#include "supervisor/frontend/triton_model_config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace torchfarm {
namespace {

using nlohmann::json;

const json& Field(const json& object, const char* key) {
  static const json kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::vector<int64_t> ShapeOf(const json& tensor) {
  std::vector<int64_t> shape;
  const json& dims = Field(tensor, "shape");
  if (!dims.is_array()) return shape;
  for (const json& dim : dims) shape.push_back(dim.is_number_integer() ? dim.get<int64_t>() : -1);
  return shape;
}

// True when every input has a leading variable (batch) dimension.
bool Batches(const json& inputs) {
  if (!inputs.is_array() || inputs.empty()) return false;
  for (const json& input : inputs) {
    const std::vector<int64_t> shape = ShapeOf(input);
    if (shape.empty() || shape[0] != -1) return false;
  }
  return true;
}

json Tensors(const json& list, bool batched) {
  json out = json::array();
  if (!list.is_array()) return out;
  for (const json& tensor : list) {
    std::vector<int64_t> dims = ShapeOf(tensor);
    if (batched && !dims.empty()) dims.erase(dims.begin());
    const json& datatype = Field(tensor, "datatype");
    out.push_back({{"name", Field(tensor, "name")},
                   {"data_type", "TYPE_" + (datatype.is_string() ? datatype.get<std::string>()
                                                                 : std::string("INVALID"))},
                   {"format", "FORMAT_NONE"},
                   {"dims", dims}});
  }
  return out;
}

json InstanceGroups(const std::string& name, const json& instances) {
  json groups = json::array();
  if (!instances.is_array()) return groups;
  for (size_t i = 0; i < instances.size(); ++i) {
    const std::string device = Field(instances[i], "device").is_string()
                                   ? Field(instances[i], "device").get<std::string>()
                                   : "cpu";
    json group = {{"name", name + "_" + std::to_string(i)},
                  {"count", Field(instances[i], "count")},
                  {"kind", device.rfind("cuda", 0) == 0 ? "KIND_GPU" : "KIND_CPU"}};
    if (device.rfind("cuda:", 0) == 0) {
      try {
        group["gpus"] = json::array({std::stoi(device.substr(5))});
      } catch (const std::exception&) {
        group["gpus"] = json::array();
      }
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

}  // namespace

json TritonModelConfigJson(const json& model) {
  const json& scheduling = Field(model, "scheduling");
  const json& inputs = Field(model, "inputs");
  const bool batched = Batches(inputs);
  const int64_t farm_batch = Field(scheduling, "max_batch_size").is_number_integer()
                                 ? Field(scheduling, "max_batch_size").get<int64_t>()
                                 : 1;
  const std::string name =
      Field(model, "name").is_string() ? Field(model, "name").get<std::string>() : std::string();
  json config = {{"name", name},
                 {"platform", "pytorch_libtorch"},
                 {"backend", "pytorch"},
                 {"max_batch_size", batched ? farm_batch : 0},
                 {"input", Tensors(inputs, batched)},
                 {"output", Tensors(Field(model, "outputs"), batched)},
                 {"instance_group", InstanceGroups(name, Field(scheduling, "instances"))}};
  if (batched && farm_batch > 1) {
    config["dynamic_batching"] = {
        {"max_queue_delay_microseconds", Field(scheduling, "max_queue_delay_us")},
        {"preferred_batch_size", Field(scheduling, "preferred_batch_sizes")},
        {"priority_levels", Field(scheduling, "priority_levels")},
        {"default_priority_level", Field(scheduling, "default_priority_level")},
        {"default_queue_policy", {{"max_queue_size", Field(scheduling, "max_queue_size")}}}};
  }
  return config;
}

}  // namespace torchfarm
