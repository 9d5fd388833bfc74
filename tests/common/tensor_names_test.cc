// Named tensors: the name rules and defaults, config `inputs[k].name` and `outputs` at their
// limits, the v2 datatype names, and names in request and reply headers (both parser paths).
#include "common/tensor_names.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/config.h"
#include "common/dtype.h"
#include "common/protocol.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(TensorNamesTest, NamesAreOneToSixtyFourAllowedCharacters) {
  EXPECT_TRUE(ValidTensorName("x"));
  EXPECT_TRUE(ValidTensorName("input_ids:0.a-B9"));
  EXPECT_TRUE(ValidTensorName(std::string(kMaxTensorNameBytes, 'a')));
  EXPECT_FALSE(ValidTensorName(std::string(kMaxTensorNameBytes + 1, 'a')));
  EXPECT_FALSE(ValidTensorName(""));
  EXPECT_FALSE(ValidTensorName("a b"));
  EXPECT_FALSE(ValidTensorName("a/b"));
  EXPECT_FALSE(ValidTensorName("\"x\""));
  EXPECT_FALSE(ValidTensorName("\xc3\xa9"));
  EXPECT_EQ(DefaultInputName(0), "INPUT__0");
  EXPECT_EQ(DefaultOutputName(15), "OUTPUT__15");
}

TEST(TensorNamesTest, V2DatatypeNamesRoundTrip) {
  for (uint8_t code = 0; code < 32; ++code) {
    auto dtype = DTypeFromCode(code);
    if (!dtype || IsBytes(*dtype)) continue;  // BYTES: not taken by the v2 front ends yet
    EXPECT_EQ(DTypeFromV2Name(V2DatatypeName(*dtype)), dtype) << int(code);
  }
  EXPECT_EQ(V2DatatypeName(DType::kFloat32), "FP32");
  EXPECT_EQ(V2DatatypeName(DType::kBFloat16), "BF16");
  EXPECT_EQ(V2DatatypeName(DType::kUInt8), "UINT8");
  EXPECT_EQ(V2DatatypeName(DType::kBool), "BOOL");
  EXPECT_EQ(DTypeFromV2Name("BYTES"), std::nullopt);
  EXPECT_EQ(DTypeFromV2Name("UINT16"), std::nullopt);
  EXPECT_EQ(DTypeFromV2Name("fp32"), std::nullopt);
  EXPECT_THAT(AllV2DatatypeNames(), HasSubstr("FP32, FP64, FP16, BF16, INT64"));
}

// --- config -------------------------------------------------------------------------------------

json TwoInputModel() {
  return json::parse(R"({"models": [{"name": "m", "path": "m.pt", "inputs": [
      {"name": "x", "dtype": "float32", "shape": [-1, 4]},
      {"dtype": "int64", "shape": [-1]}]}]})");
}

Status ParseNamesConfig(const json& j, FarmConfig* c) { return ParseConfig(j, "/base", c); }

std::string NamesConfigError(const json& j) {
  FarmConfig c;
  Status s = ParseNamesConfig(j, &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << j.dump();
  return s.message();
}

TEST(ConfigNamesTest, InputNamesDefaultToInputK) {
  FarmConfig c;
  ASSERT_TRUE(ParseNamesConfig(TwoInputModel(), &c).ok());
  const ModelConfig& m = c.models[0];
  EXPECT_EQ(m.input_names, (std::vector<std::string>{"x", "INPUT__1"}));
  EXPECT_EQ(m.input_name(0), "x");
  EXPECT_EQ(m.input_name(1), "INPUT__1");
  EXPECT_EQ(m.input_name(2), "INPUT__2");  // beyond the list: the default
  EXPECT_TRUE(m.outputs.empty());
  EXPECT_EQ(m.output_name(0), "OUTPUT__0");
}

TEST(ConfigNamesTest, InputNamesMustBeValidAndUnique) {
  json j = TwoInputModel();
  j["models"][0]["inputs"][0]["name"] = "bad name";
  EXPECT_THAT(NamesConfigError(j),
              HasSubstr("config.models[0].inputs[0].name: expected 1..64 of the "
                        "characters A-Z a-z 0-9 _ . : -, got \"bad name\""));
  j["models"][0]["inputs"][0]["name"] = 7;
  EXPECT_THAT(NamesConfigError(j), HasSubstr("config.models[0].inputs[0].name: expected 1..64"));
  EXPECT_THAT(NamesConfigError(j), HasSubstr("got 7"));
  j["models"][0]["inputs"][0]["name"] = "";
  EXPECT_THAT(NamesConfigError(j), HasSubstr("got \"\""));
  j["models"][0]["inputs"][0]["name"] = std::string(65, 'n');
  EXPECT_THAT(NamesConfigError(j), HasSubstr("config.models[0].inputs[0].name: expected 1..64"));
  j["models"][0]["inputs"][0]["name"] = std::string(64, 'n');
  FarmConfig c;
  EXPECT_TRUE(ParseNamesConfig(j, &c).ok());
  // A given name may not take another input's default.
  j["models"][0]["inputs"][0]["name"] = "INPUT__1";
  EXPECT_THAT(NamesConfigError(j),
              HasSubstr("config.models[0].inputs[1].name: \"INPUT__1\" is already "
                        "the name of config.models[0].inputs[0]"));
  j["models"][0]["inputs"][0]["name"] = "y";
  j["models"][0]["inputs"][1]["name"] = "y";
  EXPECT_THAT(NamesConfigError(j), HasSubstr("config.models[0].inputs[1].name: \"y\" is already"));
}

TEST(ConfigNamesTest, OutputsAreReadWithNamesAndWildcards) {
  json j = TwoInputModel();
  j["models"][0]["outputs"] = json::parse(R"([
      {"name": "logits", "dtype": "float32", "shape": [-1, 10]},
      {"dtype": "int64", "shape": [-1]}])");
  FarmConfig c;
  ASSERT_TRUE(ParseNamesConfig(j, &c).ok());
  const ModelConfig& m = c.models[0];
  ASSERT_EQ(m.outputs.size(), 2u);
  EXPECT_EQ(m.outputs[0], (TensorSpec{DType::kFloat32, {-1, 10}}));
  EXPECT_EQ(m.outputs[1], (TensorSpec{DType::kInt64, {-1}}));
  EXPECT_EQ(m.output_names, (std::vector<std::string>{"logits", "OUTPUT__1"}));
  EXPECT_EQ(m.output_name(2), "OUTPUT__2");
}

TEST(ConfigNamesTest, OutputsAtTheirLimits) {
  json j = TwoInputModel();
  json outputs = json::array();
  for (size_t i = 0; i < kMaxOutputs; ++i) outputs.push_back({{"dtype", "uint8"}, {"shape", {1}}});
  j["models"][0]["outputs"] = outputs;
  FarmConfig c;
  ASSERT_TRUE(ParseNamesConfig(j, &c).ok());
  EXPECT_EQ(c.models[0].outputs.size(), kMaxOutputs);
  EXPECT_EQ(c.models[0].output_names.back(), "OUTPUT__15");
  outputs.push_back({{"dtype", "uint8"}, {"shape", {1}}});
  j["models"][0]["outputs"] = outputs;
  EXPECT_THAT(NamesConfigError(j), HasSubstr("config.models[0].outputs: 17 outputs, at most 16"));
  j["models"][0]["outputs"] = json::array();
  EXPECT_THAT(NamesConfigError(j),
              HasSubstr("config.models[0].outputs: expected a non-empty array of "
                        "{\"name\", \"dtype\", \"shape\"}, got array []"));
  j["models"][0]["outputs"] = "logits";
  EXPECT_THAT(NamesConfigError(j), HasSubstr("got string \"logits\""));
  j["models"][0]["outputs"] = json::parse(R"([{"dtype": "float32", "shape": [-2]}])");
  EXPECT_THAT(NamesConfigError(j), HasSubstr("config.models[0].outputs[0].shape[0]: expected an "
                                             "integer in -1..9223372036854775807, got number -2"));
  j["models"][0]["outputs"] = json::parse(R"([{"dtype": "complex64", "shape": [1]}])");
  EXPECT_THAT(NamesConfigError(j), HasSubstr("config.models[0].outputs[0].dtype: expected one of"));
  j["models"][0]["outputs"] = json::parse(R"([{"dtype": "float32", "shape": [1], "x": 1}])");
  EXPECT_THAT(NamesConfigError(j), HasSubstr("config.models[0].outputs[0]: unknown key 'x'"));
  j["models"][0]["outputs"] =
      json::parse(R"([{"dtype": "float32", "shape": [1]}, {"name": "OUTPUT__0", "dtype": "float32",
                      "shape": [1]}])");
  EXPECT_THAT(NamesConfigError(j), HasSubstr("config.models[0].outputs[1].name: \"OUTPUT__0\" is "
                                             "already the name of config.models[0].outputs[0]"));
}

TEST(ConfigNamesTest, SixteenNamedInputsAreTheMost) {
  json j = TwoInputModel();
  json inputs = json::array();
  for (size_t i = 0; i < kMaxInputs; ++i) {
    inputs.push_back({{"name", "in" + std::to_string(i)}, {"dtype", "uint8"}, {"shape", {1}}});
  }
  j["models"][0]["inputs"] = inputs;
  FarmConfig c;
  ASSERT_TRUE(ParseNamesConfig(j, &c).ok());
  EXPECT_EQ(c.models[0].input_names.back(), "in15");
  inputs.push_back({{"name", "in16"}, {"dtype", "uint8"}, {"shape", {1}}});
  j["models"][0]["inputs"] = inputs;
  EXPECT_THAT(NamesConfigError(j), HasSubstr("config.models[0].inputs: 17 inputs, at most 16"));
}

// --- request headers -----------------------------------------------------------------------------

// Parses with both paths; expects the fast path to take it when `fast` and both to agree.
RequestHeader ParseBoth(const std::string& text, bool fast) {
  RequestHeader by_fast, by_json;
  EXPECT_EQ(ParseRequestHeaderFast(text, &by_fast), fast) << text;
  Status s = ParseRequestHeaderJson(text, &by_json);
  EXPECT_TRUE(s.ok()) << s.message();
  if (fast) {
    EXPECT_EQ(by_fast.input_names, by_json.input_names);
    EXPECT_EQ(by_fast.inputs, by_json.inputs);
  }
  return by_json;
}

TEST(ProtocolNamesTest, InputNamesAreReadByBothPaths) {
  RequestHeader h =
      ParseBoth(R"({"v":1,"model":"m","inputs":[{"name":"y","dtype":"int64","shape":[3]},)"
                R"({"dtype":"float32","shape":[3,4],"name":"x:0"}]})",
                true);
  EXPECT_EQ(h.input_names, (std::vector<std::string>{"y", "x:0"}));
  h = ParseBoth(R"({"v":1,"model":"m","inputs":[{"dtype":"int64","shape":[3]}]})", true);
  EXPECT_TRUE(h.input_names.empty());
  // An escape in a name is left to the JSON path, which reads the same name.
  h = ParseBoth(R"({"v":1,"model":"m","inputs":[{"name":"\u0078","dtype":"int64","shape":[3]}]})",
                false);
  EXPECT_EQ(h.input_names, (std::vector<std::string>{"x"}));
  // With shared memory only the JSON path reads it.
  h = ParseBoth(R"({"v":1,"model":"m","inputs":[{"name":"x","dtype":"int64","shape":[3],)"
                R"("shm":{"region":"r","offset":0}}]})",
                false);
  EXPECT_EQ(h.input_names, (std::vector<std::string>{"x"}));
}

std::string HeaderError(const std::string& text) {
  RequestHeader h;
  EXPECT_FALSE(ParseRequestHeaderFast(text, &h)) << text;
  Status s = ParseRequestHeader(text, &h);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
  return s.message();
}

TEST(ProtocolNamesTest, EveryInputNamedOrNone) {
  EXPECT_THAT(
      HeaderError(R"({"v":1,"model":"m","inputs":[{"name":"x","dtype":"int64","shape":[3]},)"
                  R"({"dtype":"int64","shape":[3]}]})"),
      HasSubstr("inputs[1].name: missing, but inputs[0] has one; name every input or none"));
  EXPECT_THAT(HeaderError(R"({"v":1,"model":"m","inputs":[{"dtype":"int64","shape":[3]},)"
                          R"({"name":"y","dtype":"int64","shape":[3]}]})"),
              HasSubstr("inputs[1].name: given, but inputs[0] has none"));
}

TEST(ProtocolNamesTest, BadNamesAreRefusedWithWhatWasReceived) {
  EXPECT_THAT(
      HeaderError(R"({"v":1,"model":"m","inputs":[{"name":"","dtype":"int64","shape":[3]}]})"),
      HasSubstr("inputs[0].name: expected 1..64 of the characters A-Z a-z 0-9 _ . : -, "
                "got \"\""));
  EXPECT_THAT(
      HeaderError(R"({"v":1,"model":"m","inputs":[{"name":1,"dtype":"int64","shape":[3]}]})"),
      HasSubstr("got 1"));
  EXPECT_THAT(
      HeaderError(R"({"v":1,"model":"m","inputs":[{"name":"a b","dtype":"int64","shape":[3]}]})"),
      HasSubstr("got \"a b\""));
  const std::string long_name(65, 'n');
  EXPECT_THAT(HeaderError(R"({"v":1,"model":"m","inputs":[{"name":")" + long_name +
                          R"(","dtype":"int64","shape":[3]}]})"),
              HasSubstr("inputs[0].name: expected 1..64"));
  // A repeated "name" key: the JSON path decides (the last one).
  RequestHeader h = ParseBoth(
      R"({"v":1,"model":"m","inputs":[{"name":"a","name":"b","dtype":"int64","shape":[3]}]})",
      false);
  EXPECT_EQ(h.input_names, (std::vector<std::string>{"b"}));
}

// --- replies -------------------------------------------------------------------------------------

TEST(ProtocolNamesTest, RepliesNameEveryOutput) {
  const std::vector<TensorSpec> outputs = {{DType::kFloat32, {2, 3}}, {DType::kInt64, {2}}};
  const std::string named = MakeOkReply(7, outputs, {"logits"}, StageTimes{}, 1);
  const json j = json::parse(named);
  EXPECT_THAT(named, HasSubstr(R"({"dtype":"float32","name":"logits","shape":[2,3]})"));
  EXPECT_EQ(j["outputs"][0]["name"], "logits");
  EXPECT_EQ(j["outputs"][1]["name"], "OUTPUT__1");
  ReplyHeader reply;
  ASSERT_TRUE(ParseReplyHeader(named, &reply).ok());
  EXPECT_EQ(reply.output_names, (std::vector<std::string>{"logits", "OUTPUT__1"}));
  EXPECT_EQ(reply.outputs, outputs);

  // Without names every output is OUTPUT__k; a name that needs escaping is escaped.
  EXPECT_EQ(json::parse(MakeOkReply(7, outputs, StageTimes{}, 1))["outputs"][0]["name"],
            "OUTPUT__0");
  EXPECT_EQ(json::parse(MakeOkReply(7, outputs, {"a\"b"}, StageTimes{}, 1))["outputs"][0]["name"],
            "a\"b");
  const std::vector<uint64_t> offsets = {0, 64};
  const json shm =
      json::parse(MakeOkReply(7, outputs, {"p", "q"}, StageTimes{}, 1, "tok", &offsets));
  EXPECT_EQ(shm["outputs"][1]["name"], "q");
  EXPECT_EQ(shm["outputs"][1]["shm"]["offset"], 64);
}

TEST(ProtocolNamesTest, RepliesWithoutNamesReadAsOutputK) {
  ReplyHeader reply;
  ASSERT_TRUE(ParseReplyHeader(R"({"v":1,"id":1,"status":"ok","outputs":[)"
                               R"({"dtype":"float32","shape":[1]},{"dtype":"int64","shape":[]}]})",
                               &reply)
                  .ok());
  EXPECT_EQ(reply.output_names, (std::vector<std::string>{"OUTPUT__0", "OUTPUT__1"}));
  Status bad = ParseReplyHeader(
      R"({"v":1,"id":1,"status":"ok","outputs":[{"dtype":"float32","shape":[1],"name":3}]})",
      &reply);
  EXPECT_EQ(bad.code(), StatusCode::kInternal);
  EXPECT_THAT(bad.message(), HasSubstr("outputs[0].name: expected a string, got 3"));
}

}  // namespace
}  // namespace torchfarm
