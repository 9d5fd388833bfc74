// ModelMetadataJson: inputs from the config (names defaulting to INPUT__k), outputs from the
// config when it declares them, else learned (first report wins per model file, dim 0 -1 when the
// model batches), else none.
#include "supervisor/dispatch/model_metadata.h"

#include <gtest/gtest.h>

#include "ipc/control_protocol.h"

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
  EXPECT_FALSE(ipc::ReadyOutputsFromMessage(json{{"type", "ready"}}, &read));
  EXPECT_FALSE(ipc::ReadyOutputsFromMessage(
      json::parse(R"({"outputs":[{"dtype":"float32","shape":[-1]}]})"), &read));
  EXPECT_FALSE(ipc::ReadyOutputsFromMessage(json::parse(R"({"outputs":"x"})"), &read));
  EXPECT_EQ(read, outputs) << "a refused message leaves the output untouched";
}

}  // namespace
}  // namespace torchfarm
