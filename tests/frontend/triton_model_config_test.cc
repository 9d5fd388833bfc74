// TritonModelConfigJson: the farm's model entry as Triton's model configuration JSON (issue 30
// item 6, the model configuration extension that perf_analyzer reads).
#include "supervisor/frontend/triton_model_config.h"

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

using nlohmann::json;

json Entry(json inputs, json outputs, json scheduling) {
  return {{"name", "mlp"},    {"version", "1"},     {"platform", "pytorch_libtorch"},
          {"inputs", inputs}, {"outputs", outputs}, {"scheduling", scheduling}};
}

TEST(TritonModelConfigTest, ABatchingModelHasDimsWithoutTheBatchAndDynamicBatching) {
  const json scheduling = {
      {"max_batch_size", 8},
      {"max_queue_delay_us", 200},
      {"preferred_batch_sizes", {4, 8}},
      {"priority_levels", 2},
      {"default_priority_level", 2},
      {"max_queue_size", 1024},
      {"instances", {{{"device", "cpu"}, {"count", 2}}, {{"device", "cuda:1"}, {"count", 1}}}}};
  const json config = TritonModelConfigJson(
      Entry({{{"name", "INPUT__0"}, {"datatype", "FP32"}, {"shape", {-1, 256}}}},
            {{{"name", "OUTPUT__0"}, {"datatype", "INT64"}, {"shape", {-1, 128}}}}, scheduling));
  EXPECT_EQ(config, json::parse(R"({
    "name": "mlp", "platform": "pytorch_libtorch", "backend": "pytorch", "max_batch_size": 8,
    "input": [{"name": "INPUT__0", "data_type": "TYPE_FP32", "format": "FORMAT_NONE",
               "dims": [256]}],
    "output": [{"name": "OUTPUT__0", "data_type": "TYPE_INT64", "format": "FORMAT_NONE",
                "dims": [128]}],
    "dynamic_batching": {"max_queue_delay_microseconds": 200, "preferred_batch_size": [4, 8],
                         "priority_levels": 2, "default_priority_level": 2,
                         "default_queue_policy": {"max_queue_size": 1024}},
    "instance_group": [{"name": "mlp_0", "count": 2, "kind": "KIND_CPU"},
                       {"name": "mlp_1", "count": 1, "kind": "KIND_GPU", "gpus": [1]}]})"))
      << config.dump(2);
}

TEST(TritonModelConfigTest, AFixedShapeModelHasMaxBatchSizeZeroAndWholeDims) {
  const json config = TritonModelConfigJson(
      Entry({{{"name", "x"}, {"datatype", "UINT8"}, {"shape", {3, 224, 224}}}}, json::array(),
            {{"max_batch_size", 1}, {"instances", json::array()}}));
  EXPECT_EQ(config["max_batch_size"], 0);
  EXPECT_EQ(config["input"][0]["dims"], json::array({3, 224, 224}));
  EXPECT_EQ(config["input"][0]["data_type"], "TYPE_UINT8");
  EXPECT_EQ(config["output"], json::array());
  EXPECT_FALSE(config.contains("dynamic_batching"));
}

// The loop builds the entry, but a malformed one gives a config, never an exception.
TEST(TritonModelConfigTest, AMalformedEntryStillGivesAConfig) {
  for (const json& entry : {json::object(), json{{"inputs", 3}, {"scheduling", "x"}},
                            json{{"inputs", {{{"shape", "y"}}}}, {"name", 5}}}) {
    const json config = TritonModelConfigJson(entry);
    EXPECT_EQ(config["platform"], "pytorch_libtorch") << entry.dump();
  }
}

}  // namespace
}  // namespace torchfarm
