// ModelMetadataJson: inputs from the config (names defaulting to INPUT__k), outputs from the
// config when it declares them, else learned (first report wins per model file, dim 0 -1 when the
// model batches), else none.
#include "supervisor/dispatch/model_metadata.h"

#include <gtest/gtest.h>

#include "ipc/control_protocol.h"
#include "supervisor/dispatch/model_stats.h"

namespace torchfarm {
namespace {

using nlohmann::json;

ServedModel Model(ModelConfig config) {
  return ServedModel{
      std::move(config), ModelQueue(BatchingPolicy{}), ModelStats(TimePoint{}), {}, false,
      BatchCostModel()};
}

ModelConfig TwoInputs() {
  ModelConfig c;
  c.name = "add2";
  c.path = "/models/add2.pt";
  c.inputs = {TensorSpec{DType::kFloat32, {-1, 4}}, TensorSpec{DType::kBFloat16, {-1, 4}}};
  c.input_names = {"x", "INPUT__1"};
  c.max_batch_size = 8;
  return c;
}

TEST(ModelMetadataTest, InputsComeFromTheConfig) {
  ServedModel m = Model(TwoInputs());
  json j = ModelMetadataJson(m, true);
  EXPECT_EQ(j["name"], "add2");
  EXPECT_EQ(j["versions"], json::array({"1"}));
  EXPECT_EQ(j["platform"], "pytorch_libtorch");
  EXPECT_EQ(j["ready"], true);
  EXPECT_EQ(j["inputs"], json::parse(R"([{"name":"x","datatype":"FP32","shape":[-1,4]},
                                          {"name":"INPUT__1","datatype":"BF16","shape":[-1,4]}])"));
  EXPECT_EQ(j["outputs"], json::array());  // nothing declared, nothing learned yet
  EXPECT_EQ(ModelMetadataJson(m, false)["ready"], false);
}

TEST(ModelMetadataTest, InputNamesMissingFromACodeBuiltConfigDefault) {
  ModelConfig c = TwoInputs();
  c.input_names.clear();
  json j = ModelMetadataJson(Model(c), true);
  EXPECT_EQ(j["inputs"][0]["name"], "INPUT__0");
  EXPECT_EQ(j["inputs"][1]["name"], "INPUT__1");
}

TEST(ModelMetadataTest, LearnedOutputsHaveAVariableBatchDimension) {
  ServedModel m = Model(TwoInputs());
  LearnOutputs(&m, {TensorSpec{DType::kFloat32, {3, 4}}, TensorSpec{DType::kInt64, {}},
                    TensorSpec{DType::kBool, {3}}});
  // The first report stands: a later batch of other rows changes nothing.
  LearnOutputs(&m, {TensorSpec{DType::kFloat64, {5, 4}}});
  EXPECT_EQ(ModelMetadataJson(m, true)["outputs"],
            json::parse(R"([{"name":"OUTPUT__0","datatype":"FP32","shape":[-1,4]},
                            {"name":"OUTPUT__1","datatype":"INT64","shape":[]},
                            {"name":"OUTPUT__2","datatype":"BOOL","shape":[-1]}])"));
}

TEST(ModelMetadataTest, AModelThatDoesNotBatchKeepsDimZero) {
  ModelConfig c = TwoInputs();
  c.max_batch_size = 1;
  ServedModel m = Model(c);
  LearnOutputs(&m, {TensorSpec{DType::kUInt8, {1, 10}}});
  EXPECT_EQ(ModelMetadataJson(m, true)["outputs"],
            json::parse(R"([{"name":"OUTPUT__0","datatype":"UINT8","shape":[1,10]}])"));
}

TEST(ModelMetadataTest, AReloadToAnotherFileLearnsAnew) {
  ServedModel m = Model(TwoInputs());
  LearnOutputs(&m, {TensorSpec{DType::kFloat32, {3, 4}}});
  m.config.path = "/models/add2-v2.pt";
  EXPECT_EQ(ModelMetadataJson(m, true)["outputs"], json::array());  // stale: not shown
  LearnOutputs(&m, {TensorSpec{DType::kFloat16, {2, 7}}});
  EXPECT_EQ(ModelMetadataJson(m, true)["outputs"],
            json::parse(R"([{"name":"OUTPUT__0","datatype":"FP16","shape":[-1,7]}])"));
}

TEST(ModelMetadataTest, DeclaredOutputsWinOverLearnedOnes) {
  ModelConfig c = TwoInputs();
  c.outputs = {TensorSpec{DType::kFloat32, {-1, 4}}};
  c.output_names = {"sum"};
  ServedModel m = Model(c);
  LearnOutputs(&m, {TensorSpec{DType::kFloat32, {3, 4}}, TensorSpec{DType::kInt8, {3}}});
  EXPECT_EQ(ModelMetadataJson(m, true)["outputs"],
            json::parse(R"([{"name":"sum","datatype":"FP32","shape":[-1,4]}])"));
}

// What a worker reports in its "ready" message (ipc/control_protocol.h) is what is learned.
TEST(ModelMetadataTest, ReadyMessageOutputsRoundTrip) {
  const std::vector<TensorSpec> outputs = {TensorSpec{DType::kFloat32, {2, 3}},
                                           TensorSpec{DType::kInt64, {}}};
  json ready = {{"type", "ready"}, {"outputs", ipc::ReadyOutputsJson(outputs)}};
  std::vector<TensorSpec> read;
  ASSERT_TRUE(ipc::ReadyOutputsFromMessage(ready, &read));
  EXPECT_EQ(read, outputs);
  // -1: a dim the worker's dry runs found variable (issue 30, common/config.h OutputProbeBatches).
  std::vector<TensorSpec> variable;
  ASSERT_TRUE(ipc::ReadyOutputsFromMessage(
      json::parse(R"({"outputs":[{"dtype":"float32","shape":[-1, 3]}]})"), &variable));
  EXPECT_EQ(variable, (std::vector<TensorSpec>{TensorSpec{DType::kFloat32, {-1, 3}}}));
  EXPECT_FALSE(ipc::ReadyOutputsFromMessage(json{{"type", "ready"}}, &read));
  EXPECT_FALSE(ipc::ReadyOutputsFromMessage(
      json::parse(R"({"outputs":[{"dtype":"float32","shape":[-2]}]})"), &read));
  EXPECT_FALSE(ipc::ReadyOutputsFromMessage(
      json::parse(R"({"outputs":[{"dtype":"float99","shape":[1]}]})"), &read));
  EXPECT_FALSE(ipc::ReadyOutputsFromMessage(json::parse(R"({"outputs":"x"})"), &read));
  EXPECT_EQ(read, outputs) << "a refused message leaves the output untouched";
}

// What the v2 model configuration (frontend/triton_model_config.h) is made of.
TEST(ModelMetadataTest, SchedulingCarriesTheBatchingAndInstanceSettings) {
  ModelConfig c;
  c.max_batch_size = 8;
  c.max_queue_delay_us = 200;
  c.preferred_batch_sizes = {4, 8};
  c.priority_levels = 3;
  c.default_priority_level = 2;
  InstanceConfig gpu;
  gpu.device = "cuda:1";
  gpu.count = 2;
  c.instances = {gpu};
  EXPECT_EQ(SchedulingJson(c), json::parse(R"({"max_batch_size": 8, "max_queue_delay_us": 200,
      "preferred_batch_sizes": [4, 8], "priority_levels": 3, "default_priority_level": 2,
      "max_queue_size": 1024, "instances": [{"device": "cuda:1", "count": 2}]})"));
}

// The lifetime sums the v2 statistics extension reports (frontend/triton_model_stats.h).
TEST(ModelStatsTest, TotalsSumAnsweredRequestsAndRememberTheLastCompletion) {
  const TimePoint start = Clock::now();
  ModelStats stats(start);
  EXPECT_EQ(stats.totals().last_completion, TimePoint{});
  stats.RecordBatch(3);
  stats.RecordOk(10, 100, 120, start + std::chrono::seconds(1));
  stats.RecordOk(5, 50, 60, start + std::chrono::seconds(2));
  stats.RecordError(start + std::chrono::seconds(3));
  const ModelStats::Totals t = stats.totals();
  EXPECT_EQ(t.requests, 2u);
  EXPECT_EQ(t.errors, 1u);
  EXPECT_EQ(t.batches, 1u);
  EXPECT_EQ(t.rows, 3u);
  EXPECT_EQ(t.queue_us, 15u);
  EXPECT_EQ(t.compute_us, 150u);
  EXPECT_EQ(t.total_us, 180u);
  EXPECT_EQ(t.last_completion, start + std::chrono::seconds(3));
}

}  // namespace
}  // namespace torchfarm
