// Named tensors end to end: a real supervisor and worker serving the 2-input add2 model
// (x + 2 * y, tools/mkmodel.cc). Named inputs sent in reverse order must give the bytes the
// positional request gives, and replies name their outputs (config "outputs", else OUTPUT__k).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "farm_fixture.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;

json Add2Model(const std::string& name, bool named) {
  json x = {{"dtype", "float32"}, {"shape", {-1, 4}}};
  json y = x;
  json m = {{"name", name},
            {"path", ModelDir() + "/add2.pt"},
            {"instances", json::array({{{"device", "cpu"}, {"count", 1}}})}};
  if (named) {
    x["name"] = "x";
    y["name"] = "y";
    m["outputs"] = json::array({{{"name", "sum"}, {"dtype", "float32"}, {"shape", {-1, 4}}}});
  }
  m["inputs"] = json::array({x, y});
  return m;
}

TensorView View(const std::vector<float>& values, int64_t rows, const std::string& name = {}) {
  TensorView view(TensorSpec{DType::kFloat32, {rows, 4}}, values.data(),
                  values.size() * sizeof(float));
  view.name = name;
  return view;
}

class NamedTensorsTest : public ::testing::Test {
 protected:
  static constexpr int64_t kRows = 3;
  NamedTensorsTest() : x_(kRows * 4), y_(kRows * 4) {
    for (size_t i = 0; i < x_.size(); ++i) {
      // Values whose sums round, so a swapped x and y could not give the same bytes.
      x_[i] = 0.1f * static_cast<float>(i) + 1.0f / 3.0f;
      y_[i] = -0.7f * static_cast<float>(i) + 1.0f / 7.0f;
    }
  }
  std::vector<float> x_, y_;
};

TEST_F(NamedTensorsTest, NamedInputsInReverseOrderGiveThePositionalResultBitForBit) {
  Farm farm(json::array({Add2Model("add2", true), Add2Model("add2_plain", false)}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  Client client(farm.endpoint(), 20'000);

  InferResult positional;
  Status s = client.Infer("add2", {View(x_, kRows), View(y_, kRows)}, &positional);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(positional.outputs.size(), 1u);
  EXPECT_EQ(positional.outputs[0].name, "sum");
  EXPECT_EQ(positional.header.output_names, (std::vector<std::string>{"sum"}));
  EXPECT_EQ(positional.outputs[0].spec, (TensorSpec{DType::kFloat32, {kRows, 4}}));
  // x + 2 * y in float32: 2 * y is exact, so one rounding, the same here as in the model.
  std::vector<float> expected(x_.size());
  for (size_t i = 0; i < x_.size(); ++i) expected[i] = x_[i] + 2.0f * y_[i];
  ASSERT_EQ(positional.outputs[0].data.size(), expected.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(positional.outputs[0].data.data(), expected.data(),
                        expected.size() * sizeof(float)),
            0);

  InferResult named;
  s = client.Infer("add2", {View(y_, kRows, "y"), View(x_, kRows, "x")}, &named);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(named.outputs.size(), 1u);
  EXPECT_EQ(named.outputs[0].name, "sum");
  EXPECT_EQ(named.outputs[0].spec, positional.outputs[0].spec);
  EXPECT_EQ(named.outputs[0].data, positional.outputs[0].data);

  // Swapped without names, the model sees y as x: other bytes (the test can tell the orders apart).
  InferResult swapped;
  ASSERT_TRUE(client.Infer("add2", {View(y_, kRows), View(x_, kRows)}, &swapped).ok());
  EXPECT_NE(swapped.outputs[0].data, positional.outputs[0].data);

  // A model whose config names nothing takes INPUT__k and answers OUTPUT__k.
  InferResult plain;
  s = client.Infer("add2_plain", {View(y_, kRows, "INPUT__1"), View(x_, kRows, "INPUT__0")},
                   &plain);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(plain.outputs[0].name, "OUTPUT__0");
  EXPECT_EQ(plain.outputs[0].data, positional.outputs[0].data);
}

TEST_F(NamedTensorsTest, AWrongNameIsRefusedListingTheModelsInputs) {
  Farm farm(json::array({Add2Model("add2", true)}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  Client client(farm.endpoint(), 20'000);
  InferResult result;
  Status s = client.Infer("add2", {View(y_, kRows, "y"), View(x_, kRows, "z")}, &result);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(s.message(), "inputs[1].name: no input is named \"z\" (model 'add2' takes x, y)");
  s = client.Infer("add2", {View(y_, kRows, "y"), View(x_, kRows)}, &result);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("name every input or none"), std::string::npos) << s.message();
  // The farm still serves.
  s = client.Infer("add2", {View(x_, kRows, "x"), View(y_, kRows, "y")}, &result);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace torchfarm::testing
