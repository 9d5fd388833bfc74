#include "common/protocol.h"

#include "common/tensor_names.h"

#include <algorithm>
#include <limits>

#include <gmock/gmock.h>

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json ValidHeader() {
  return json{{"v", 1},
              {"id", 42},
              {"model", "resnet"},
              {"inputs", json::array({{{"dtype", "float32"}, {"shape", {2, 3}}},
                                      {{"dtype", "int64"}, {"shape", json::array()}}})},
              {"timeout_ms", 250},
              {"priority", 3}};
}

Status ParseHeaderText(const json& j, RequestHeader* out) {
  return ParseRequestHeader(j.dump(), out);
}

// Parses `j`, expects INVALID_ARGUMENT and returns the message.
std::string ProtocolError(const json& j) {
  RequestHeader header;
  Status s = ParseHeaderText(j, &header);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << j.dump();
  return s.message();
}

TEST(ProtocolTest, ParsesAValidHeader) {
  RequestHeader h;
  ASSERT_TRUE(ParseHeaderText(ValidHeader(), &h).ok());
  EXPECT_EQ(h.id, json(42));
  EXPECT_EQ(h.model, "resnet");
  ASSERT_EQ(h.inputs.size(), 2u);
  EXPECT_EQ(h.inputs[0], (TensorSpec{DType::kFloat32, {2, 3}}));
  EXPECT_EQ(h.inputs[1], (TensorSpec{DType::kInt64, {}}));
  EXPECT_EQ(h.timeout_ms, 250);
  EXPECT_EQ(h.priority, 3);
}

TEST(ProtocolTest, OptionalFieldsDefault) {
  json j = ValidHeader();
  j.erase("id");
  j.erase("timeout_ms");
  j.erase("priority");
  RequestHeader h;
  ASSERT_TRUE(ParseHeaderText(j, &h).ok());
  EXPECT_TRUE(h.id.is_null());
  EXPECT_EQ(h.timeout_ms, 0);
  EXPECT_EQ(h.priority, 0);
}

TEST(ProtocolTest, RejectsNonJson) {
  RequestHeader h;
  Status s = ParseRequestHeader("{\"v\": 1, \"model\": ", &h);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not valid JSON"));
  EXPECT_TRUE(h.id.is_null());
  s = ParseRequestHeader("", &h);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST(ProtocolTest, RejectsJsonThatIsNotAnObject) {
  EXPECT_EQ(ProtocolError(json::array({1, 2})), "frame 0 must be a JSON object, got array");
  EXPECT_EQ(ProtocolError(json("hello")), "frame 0 must be a JSON object, got string");
  EXPECT_EQ(ProtocolError(json(7)), "frame 0 must be a JSON object, got number");
}

TEST(ProtocolTest, RejectsMissingOrWrongVersion) {
  json j = ValidHeader();
  j.erase("v");
  EXPECT_EQ(ProtocolError(j), "header field 'v': expected protocol version 1, got nothing");
  j["v"] = 2;
  EXPECT_EQ(ProtocolError(j), "header field 'v': expected protocol version 1, got 2");
  j["v"] = "1";
  EXPECT_EQ(ProtocolError(j), "header field 'v': expected protocol version 1, got \"1\"");
}

TEST(ProtocolTest, RejectsMissingOrEmptyModel) {
  json j = ValidHeader();
  j.erase("model");
  EXPECT_EQ(ProtocolError(j), "header field 'model': expected a non-empty string");
  j["model"] = "";
  EXPECT_EQ(ProtocolError(j), "header field 'model': expected a non-empty string");
  j["model"] = 5;
  EXPECT_EQ(ProtocolError(j), "header field 'model': expected a non-empty string");
}

TEST(ProtocolTest, RejectsMissingOrEmptyInputs) {
  json j = ValidHeader();
  j.erase("inputs");
  EXPECT_THAT(ProtocolError(j), HasSubstr("header field 'inputs': expected a non-empty array"));
  j["inputs"] = json::array();
  EXPECT_THAT(ProtocolError(j), HasSubstr("header field 'inputs': expected a non-empty array"));
  j["inputs"] = json::object();
  EXPECT_THAT(ProtocolError(j), HasSubstr("header field 'inputs': expected a non-empty array"));
}

TEST(ProtocolTest, RejectsTooManyInputs) {
  json j = ValidHeader();
  j["inputs"] = json::array();
  for (size_t i = 0; i <= kMaxInputs; ++i) {
    j["inputs"].push_back({{"dtype", "uint8"}, {"shape", {1}}});
  }
  EXPECT_EQ(ProtocolError(j), "header field 'inputs': 17 inputs exceed the maximum of 16");
}

TEST(ProtocolTest, BadDtypeListsValidNamesAndTheOneReceived) {
  json j = ValidHeader();
  j["inputs"][1]["dtype"] = "float";
  EXPECT_EQ(ProtocolError(j),
            "inputs[1].dtype: expected one of " + AllDTypeNames() + ", got 'float'");
  j["inputs"][1]["dtype"] = 32;
  EXPECT_THAT(ProtocolError(j), HasSubstr("inputs[1].dtype: expected a string, one of float32"));
  j["inputs"][1].erase("dtype");
  EXPECT_THAT(ProtocolError(j), HasSubstr("inputs[1].dtype"));
}

TEST(ProtocolTest, RejectsNegativeDimension) {
  json j = ValidHeader();
  j["inputs"][0]["shape"] = {2, -3};
  EXPECT_EQ(ProtocolError(j),
            "inputs[0].shape[1]: expected an integer in 0..9223372036854775807, got number -3");
  j["inputs"][0]["shape"] = {-1, 3};  // -1 is a wildcard only in model declarations
  EXPECT_EQ(ProtocolError(j),
            "inputs[0].shape[0]: expected an integer in 0..9223372036854775807, got number -1");
}

TEST(ProtocolTest, RejectsRankAboveMaximum) {
  json j = ValidHeader();
  j["inputs"][0]["shape"] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(ProtocolError(j), "inputs[0].shape: rank 9 exceeds the maximum of 8");
  j["inputs"][0]["shape"] = {1, 1, 1, 1, 1, 1, 1, 1};
  RequestHeader h;
  EXPECT_TRUE(ParseHeaderText(j, &h).ok());
}

TEST(ProtocolTest, RejectsNonIntegerDimensions) {
  json j = ValidHeader();
  j["inputs"][0]["shape"] = {2.5, 3};
  EXPECT_EQ(ProtocolError(j),
            "inputs[0].shape[0]: expected an integer in 0..9223372036854775807, got number 2.5");
  j["inputs"][0]["shape"] = {"2", 3};
  EXPECT_EQ(ProtocolError(j),
            "inputs[0].shape[0]: expected an integer in 0..9223372036854775807, got string \"2\"");
  j["inputs"][0]["shape"] = 6;
  EXPECT_EQ(ProtocolError(j), "inputs[0].shape: expected an array of integers");
}

TEST(ProtocolTest, RejectsUnknownFields) {
  json j = ValidHeader();
  j["deadline"] = 5;
  EXPECT_EQ(
      ProtocolError(j),
      "header: unknown field 'deadline' (expected v, id, op, model, version, inputs, timeout_ms, "
      "deadline_unix_us, priority, client_weight, output_shm, outputs_shm)");
  j = ValidHeader();
  j["inputs"][0]["layout"] = "nchw";
  EXPECT_EQ(ProtocolError(j), "inputs[0]: unknown key 'layout' (expected dtype, shape, name)");
}

TEST(ProtocolTest, RejectsNegativeOrNonIntegerTimeout) {
  json j = ValidHeader();
  j["timeout_ms"] = -1;
  EXPECT_EQ(
      ProtocolError(j),
      "header field 'timeout_ms': expected an integer in 0..9223372036854775807, got number -1");
  j["timeout_ms"] = 1.5;
  EXPECT_EQ(
      ProtocolError(j),
      "header field 'timeout_ms': expected an integer in 0..9223372036854775807, got number 1.5");
}

// deadline_unix_us: an integer 0..2^63-1 (0 and null: none); anything else names the field.
TEST(ProtocolTest, AClientDeadlineIsAnIntegerInItsRange) {
  RequestHeader h;
  json j = ValidHeader();
  for (const json& v : {json(0), json(1), json(int64_t{1733550000123456}), json(INT64_MAX)}) {
    j["deadline_unix_us"] = v;
    ASSERT_TRUE(ParseHeaderText(j, &h).ok()) << v.dump();
    EXPECT_EQ(h.deadline_unix_us, v.get<int64_t>());
  }
  j["deadline_unix_us"] = nullptr;
  ASSERT_TRUE(ParseHeaderText(j, &h).ok());
  EXPECT_EQ(h.deadline_unix_us, 0);
  for (const json& v : {json(-1), json(1.5), json(uint64_t{1} << 63), json(UINT64_MAX)}) {
    j["deadline_unix_us"] = v;
    EXPECT_EQ(ProtocolError(j),
              "header field 'deadline_unix_us': expected an integer in 0..9223372036854775807, "
              "got number " +
                  v.dump());
  }
  j["deadline_unix_us"] = "1733550000123456";
  EXPECT_NE(ProtocolError(j).find("header field 'deadline_unix_us': expected an integer"),
            std::string::npos)
      << ProtocolError(j);
}

// Header numbers at and beyond their bounds, and where a value would wrap into the field's type:
// 2^31 and 2^32 (int), 2^63-1, 2^63 and 2^64-1 (int64, stored unsigned by the JSON parser).
TEST(ProtocolTest, HeaderNumbersAtAndBeyondTheirBounds) {
  RequestHeader h;
  json j = ValidHeader();
  j["priority"] = 1000;
  j["timeout_ms"] = INT64_MAX;
  ASSERT_TRUE(ParseHeaderText(j, &h).ok());
  EXPECT_EQ(h.priority, 1000);
  EXPECT_EQ(h.timeout_ms, INT64_MAX);
  for (const json& v : {json(int64_t{1} << 31), json(int64_t{1} << 32), json(INT64_MAX),
                        json(uint64_t{1} << 63), json(UINT64_MAX), json(INT64_MIN)}) {
    j = ValidHeader();
    j["priority"] = v;
    EXPECT_EQ(ProtocolError(j),
              "header field 'priority': expected an integer in 0..1000, got number " + v.dump());
  }
  for (const json& v : {json(uint64_t{1} << 63), json(UINT64_MAX), json(-1)}) {
    j = ValidHeader();
    j["timeout_ms"] = v;
    EXPECT_EQ(
        ProtocolError(j),
        "header field 'timeout_ms': expected an integer in 0..9223372036854775807, got number " +
            v.dump());
    j = ValidHeader();
    j["inputs"][0]["shape"][0] = v;
    EXPECT_THAT(
        ProtocolError(j),
        HasSubstr("inputs[0].shape[0]: expected an integer in 0..9223372036854775807, got number " +
                  v.dump()));
  }
  // A declared shape's -1 is a variable dimension; 2^64-1 is never read as it.
  TensorSpec spec;
  json declared = {{"dtype", "float32"}, {"shape", {UINT64_MAX, 8}}};
  EXPECT_THAT(TensorSpecFromJson(declared, "decl", true, &spec).message(),
              HasSubstr("decl.shape[0]: expected an integer in -1..9223372036854775807, got number 18446744073709551615"));
  json create = {{"v", 1}, {"op", "shm_create"}, {"bytes", UINT64_MAX}};
  EXPECT_THAT(ParseHeaderText(create, &h).message(),
              HasSubstr("'bytes': expected an integer in 1..9223372036854775807, got number "
                        "18446744073709551615"));
  create["bytes"] = INT64_MAX;
  ASSERT_TRUE(ParseHeaderText(create, &h).ok());
  EXPECT_EQ(h.shm_bytes, uint64_t{INT64_MAX});
}

TEST(ProtocolTest, RejectsBadPriority) {
  json j = ValidHeader();
  j["priority"] = -1;
  EXPECT_EQ(ProtocolError(j),
            "header field 'priority': expected an integer in 0..1000, got number -1");
  j["priority"] = 1001;
  EXPECT_EQ(ProtocolError(j),
            "header field 'priority': expected an integer in 0..1000, got number 1001");
  j["priority"] = "high";
  EXPECT_EQ(ProtocolError(j),
            "header field 'priority': expected an integer in 0..1000, got string \"high\"");
}

// client_weight (issue 32): 0.01..100, at both limits and one step past each.
TEST(ProtocolTest, ClientWeightIsReadWithinItsLimits) {
  RequestHeader h;
  ASSERT_TRUE(ParseHeaderText(ValidHeader(), &h).ok());
  EXPECT_EQ(h.client_weight, 0) << "none given";
  for (double weight : {0.01, 1.0, 2.5, 100.0}) {
    json j = ValidHeader();
    j["client_weight"] = weight;
    ASSERT_TRUE(ParseHeaderText(j, &h).ok()) << weight;
    EXPECT_EQ(h.client_weight, weight);
  }
  json j = ValidHeader();
  j["client_weight"] = 3;
  ASSERT_TRUE(ParseHeaderText(j, &h).ok()) << "an integer is a number";
  EXPECT_EQ(h.client_weight, 3);
}

TEST(ProtocolTest, RejectsBadClientWeight) {
  json j = ValidHeader();
  j["client_weight"] = 0.009;
  EXPECT_EQ(ProtocolError(j),
            "header field 'client_weight': expected a number in 0.01..100 (a client weight), got "
            "number 0.009");
  j["client_weight"] = 100.5;
  EXPECT_EQ(ProtocolError(j),
            "header field 'client_weight': expected a number in 0.01..100 (a client weight), got "
            "number 100.5");
  j["client_weight"] = 0;
  EXPECT_THAT(ProtocolError(j), HasSubstr("got number 0"));
  j["client_weight"] = -1;
  EXPECT_THAT(ProtocolError(j), HasSubstr("got number -1"));
  j["client_weight"] = "2";
  EXPECT_THAT(ProtocolError(j), HasSubstr("got string \"2\""));
}

TEST(ProtocolTest, RejectsOversizedHeaderBeforeParsing) {
  std::string text(kMaxHeaderBytes + 1, ' ');
  RequestHeader h;
  Status s = ParseRequestHeader(text, &h);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "header of 65537 bytes exceeds the limit of 65536");
}

TEST(ProtocolTest, IdIsRecoveredFromAnOtherwiseBadHeader) {
  json j = ValidHeader();
  j["id"] = "req-7";
  j["v"] = 9;
  RequestHeader h;
  EXPECT_FALSE(ParseHeaderText(j, &h).ok());
  EXPECT_EQ(h.id, json("req-7"));

  j = ValidHeader();
  j["inputs"][0]["dtype"] = "float128";
  EXPECT_FALSE(ParseHeaderText(j, &h).ok());
  EXPECT_EQ(h.id, json(42));

  j = ValidHeader();
  j["surprise"] = true;
  EXPECT_FALSE(ParseHeaderText(j, &h).ok());
  EXPECT_EQ(h.id, json(42));
}

TEST(ProtocolTest, CheckInputFramesCountsFrames) {
  RequestHeader h;
  ASSERT_TRUE(ParseHeaderText(ValidHeader(), &h).ok());
  EXPECT_TRUE(CheckInputFrames(h, {24, 8}).ok());
  Status s = CheckInputFrames(h, {24});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "header declares 2 input(s) but the message has 1 data frame(s) after the header");
  s = CheckInputFrames(h, {24, 8, 8});
  EXPECT_EQ(s.message(),
            "header declares 2 input(s) but the message has 3 data frame(s) after the header");
}

TEST(ProtocolTest, CheckInputFramesComparesByteCounts) {
  RequestHeader h;
  ASSERT_TRUE(ParseHeaderText(ValidHeader(), &h).ok());
  Status s = CheckInputFrames(h, {20, 8});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "inputs[0]: float32 [2, 3] needs 24 bytes, frame 1 has 20");
  s = CheckInputFrames(h, {24, 4});
  EXPECT_EQ(s.message(), "inputs[1]: int64 [] needs 8 bytes, frame 2 has 4");
}

TEST(ProtocolTest, OkReplyRoundTrip) {
  std::vector<TensorSpec> outputs = {{DType::kFloat32, {2, 10}}, {DType::kInt64, {2}}};
  std::string text = MakeOkReply(json(42), outputs, StageTimes{11, 22, 40}, 3);
  ReplyHeader r;
  ASSERT_TRUE(ParseReplyHeader(text, &r).ok());
  EXPECT_TRUE(r.status.ok());
  EXPECT_EQ(r.id, json(42));
  EXPECT_EQ(r.outputs, outputs);
  EXPECT_EQ(r.timing.queue_us, 11);
  EXPECT_EQ(r.timing.compute_us, 22);
  EXPECT_EQ(r.timing.total_us, 40);
  EXPECT_EQ(r.worker_id, 3);
  EXPECT_EQ(r.raw["v"], 1);
  EXPECT_EQ(r.raw["status"], "ok");
}

TEST(ProtocolTest, ErrorReplyRoundTripForEveryCode) {
  for (StatusCode code :
       {StatusCode::kInvalidArgument, StatusCode::kNotFound, StatusCode::kResourceExhausted,
        StatusCode::kDeadlineExceeded, StatusCode::kUnavailable, StatusCode::kInternal}) {
    std::string text = MakeErrorReply(json("abc"), Status(code, "it broke"));
    ReplyHeader r;
    ASSERT_TRUE(ParseReplyHeader(text, &r).ok());
    EXPECT_EQ(r.status.code(), code);
    EXPECT_EQ(r.status.message(), "it broke");
    EXPECT_EQ(r.id, json("abc"));
    EXPECT_TRUE(r.outputs.empty());
    EXPECT_EQ(r.raw["code"], std::string(StatusCodeName(code)));
  }
}

TEST(ProtocolTest, ErrorReplyWithInvalidUtf8DoesNotThrow) {
  std::string text;
  EXPECT_NO_THROW(text = MakeErrorReply(json(nullptr), InvalidArgument("bad \xff\xfe bytes")));
  ReplyHeader r;
  ASSERT_TRUE(ParseReplyHeader(text, &r).ok());
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status.message(), HasSubstr("bad "));
  EXPECT_THAT(r.status.message(), HasSubstr(" bytes"));
  EXPECT_TRUE(r.id.is_null());
}

TEST(ProtocolTest, MalformedRepliesAreInternalErrors) {
  ReplyHeader r;
  EXPECT_EQ(ParseReplyHeader("not json", &r).code(), StatusCode::kInternal);
  EXPECT_EQ(ParseReplyHeader("[1]", &r).code(), StatusCode::kInternal);
  EXPECT_EQ(ParseReplyHeader(R"({"v":1,"id":1})", &r).code(), StatusCode::kInternal);
  EXPECT_EQ(ParseReplyHeader(R"({"v":1,"id":1,"status":"ok"})", &r).code(), StatusCode::kInternal);
  Status s = ParseReplyHeader(
      R"({"v":1,"id":1,"status":"ok","outputs":[{"dtype":"float99","shape":[1]}]})", &r);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("float99"));
  // An unknown error code still reads as an error, never as ok.
  ASSERT_TRUE(
      ParseReplyHeader(R"({"v":1,"id":1,"status":"error","code":"WAT","message":"m"})", &r).ok());
  EXPECT_EQ(r.status.code(), StatusCode::kInternal);
}

TEST(ProtocolTest, TensorSpecJsonRoundTripAndWildcards) {
  TensorSpec spec{DType::kUInt8, {4, 0, 3}};
  TensorSpec back;
  ASSERT_TRUE(TensorSpecFromJson(TensorSpecToJson(spec), "x", false, &back).ok());
  EXPECT_EQ(back, spec);
  json declared = {{"dtype", "float32"}, {"shape", {-1, 8}}, {"name", "image"}};
  ASSERT_TRUE(TensorSpecFromJson(declared, "decl", true, &back).ok());
  EXPECT_EQ(back, (TensorSpec{DType::kFloat32, {-1, 8}}));
  declared["shape"] = {-2, 8};
  Status s = TensorSpecFromJson(declared, "decl", true, &back);
  EXPECT_EQ(s.message(),
            "decl.shape[0]: expected an integer in -1..9223372036854775807, got number -2 (-1 for a variable "
            "dimension)");
}

}  // namespace
}  // namespace torchfarm

namespace torchfarm {
namespace {

// MakeOkReply writes its JSON by hand; it must equal what a json object would produce.
TEST(ProtocolReply, HandWrittenOkReplyEqualsTheJsonObject) {
  std::vector<TensorSpec> outputs = {{DType::kFloat16, {2, 3}}, {DType::kBool, {}}};
  for (const nlohmann::json& id :
       {nlohmann::json(nullptr), nlohmann::json(7), nlohmann::json("a \"quoted\" id \u00e9"),
        nlohmann::json::parse(R"({"trace":[1,2,{"k":"v"}]})")}) {
    std::string text = MakeOkReply(id, outputs, StageTimes{1, 2, 3}, 4);
    nlohmann::json expected = {
        {"v", 1}, {"id", id}, {"status", "ok"},
        {"outputs", {{{"dtype", "float16"}, {"name", "OUTPUT__0"}, {"shape", {2, 3}}},
                     {{"dtype", "bool"}, {"name", "OUTPUT__1"}, {"shape", nlohmann::json::array()}}}},
        {"timing_us", {{"queue", 1}, {"compute", 2}, {"total", 3}}},
        {"worker", 4}};
    EXPECT_EQ(nlohmann::json::parse(text), expected) << text;
  }
}

// The same with every optional part: names (one that needs escaping), shared-memory offsets,
// pipeline stages, and numbers at their extremes (written with to_chars, issue 36).
TEST(ProtocolReply, HandWrittenOkReplyWithEveryPartEqualsTheJsonObject) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  std::vector<TensorSpec> outputs = {{DType::kFloat32, {0, big}}, {DType::kInt64, {1}}};
  const std::vector<uint64_t> offsets = {0, std::numeric_limits<uint64_t>::max()};
  StageTimes timing{9'000'000'000, 0, 123'456'789'012};
  timing.decode_us = 5;
  timing.preprocess_us = 0;
  timing.postprocess_us = 77;
  const uint64_t id = std::numeric_limits<uint64_t>::max();
  const std::string text = MakeOkReply(nlohmann::json(id), outputs, {"logits", "a \"b\""}, timing,
                                       -3, "deadbeef", &offsets);
  nlohmann::json expected = {{"v", 1},
                             {"id", id},
                             {"status", "ok"},
                             {"outputs",
                              {{{"dtype", "float32"},
                                {"name", "logits"},
                                {"shape", {0, big}},
                                {"shm", {{"region", "deadbeef"}, {"offset", 0}}}},
                               {{"dtype", "int64"},
                                {"name", "a \"b\""},
                                {"shape", {1}},
                                {"shm", {{"region", "deadbeef"}, {"offset", offsets[1]}}}}}},
                             {"timing_us",
                              {{"queue", 9'000'000'000},
                               {"compute", 0},
                               {"total", 123'456'789'012},
                               {"decode", 5},
                               {"preprocess", 0},
                               {"postprocess", 77}}},
                             {"worker", -3}};
  EXPECT_EQ(nlohmann::json::parse(text), expected) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), ' '), 1) << "only the name's space: " << text;
}

// MakeOkReply writes into text sized to a bound it computes first: the longest replies it can be
// asked for (no outputs and every number at its widest; the most outputs of the highest rank with
// the longest names and region) fit and equal the json object (ASan runs this test too).
TEST(ProtocolReply, TheLongestOkRepliesFitTheirBound) {
  const int64_t low = std::numeric_limits<int64_t>::min();
  StageTimes timing{low, low, low};
  timing.decode_us = std::numeric_limits<int64_t>::max();
  timing.preprocess_us = std::numeric_limits<int64_t>::max();
  timing.postprocess_us = std::numeric_limits<int64_t>::max();
  const uint64_t id = std::numeric_limits<uint64_t>::max();
  const int worker = std::numeric_limits<int>::min();
  std::string none = MakeOkReply(nlohmann::json(id), {}, timing, worker);
  nlohmann::json times = {{"queue", low},
                          {"compute", low},
                          {"total", low},
                          {"decode", timing.decode_us},
                          {"preprocess", timing.preprocess_us},
                          {"postprocess", timing.postprocess_us}};
  EXPECT_EQ(nlohmann::json::parse(none), (nlohmann::json{{"v", 1},
                                                         {"id", id},
                                                         {"status", "ok"},
                                                         {"outputs", nlohmann::json::array()},
                                                         {"timing_us", times},
                                                         {"worker", worker}}))
      << none;

  std::vector<TensorSpec> outputs;
  std::vector<std::string> names;
  std::vector<uint64_t> offsets;
  nlohmann::json expected_outputs = nlohmann::json::array();
  const std::string region(255, 'f');
  for (size_t i = 0; i < kMaxOutputs; ++i) {
    outputs.push_back({DType::kBFloat16, std::vector<int64_t>(kMaxRank, low)});
    // Half valid names at the longest, half that need escaping (each quote doubles).
    names.push_back(i % 2 ? std::string(kMaxTensorNameBytes, 'n')
                          : std::string(kMaxTensorNameBytes, '"'));
    offsets.push_back(std::numeric_limits<uint64_t>::max());
    expected_outputs.push_back({{"dtype", "bfloat16"},
                                {"name", names.back()},
                                {"shape", outputs.back().shape},
                                {"shm", {{"region", region}, {"offset", offsets.back()}}}});
  }
  std::string all =
      MakeOkReply(nlohmann::json(id), outputs, names, timing, worker, region, &offsets);
  EXPECT_EQ(nlohmann::json::parse(all)["outputs"], expected_outputs);
  EXPECT_EQ(nlohmann::json::parse(all)["timing_us"], times);
}

// The front ends' reply scan (ParseReplyHeaderLean): every reply MakeOkReply writes is read by
// the fast path with the JSON parser's result, and everything else falls back to the JSON parser.
void ExpectSameReply(const ReplyHeader& fast, const ReplyHeader& full, const std::string& text) {
  EXPECT_EQ(fast.id, full.id) << text;
  EXPECT_EQ(fast.id.type(), full.id.type()) << text;
  EXPECT_EQ(fast.status.ToString(), full.status.ToString()) << text;
  EXPECT_EQ(fast.outputs, full.outputs) << text;
  EXPECT_EQ(fast.output_names, full.output_names) << text;
  EXPECT_EQ(fast.output_shm.size(), full.output_shm.size()) << text;
  EXPECT_EQ(fast.timing.queue_us, full.timing.queue_us) << text;
  EXPECT_EQ(fast.timing.compute_us, full.timing.compute_us) << text;
  EXPECT_EQ(fast.timing.total_us, full.timing.total_us) << text;
  EXPECT_EQ(fast.timing.decode_us, full.timing.decode_us) << text;
  EXPECT_EQ(fast.timing.preprocess_us, full.timing.preprocess_us) << text;
  EXPECT_EQ(fast.timing.postprocess_us, full.timing.postprocess_us) << text;
  EXPECT_EQ(fast.worker_id, full.worker_id) << text;
}

TEST(ProtocolReply, TheFastScanReadsEveryOkReplyAsTheJsonParserDoes) {
  const std::vector<std::vector<TensorSpec>> output_sets = {
      {}, {{DType::kFloat32, {1, 256}}}, {{DType::kFloat16, {2, 3}}, {DType::kBool, {}}}};
  const std::vector<std::vector<std::string>> name_sets = {{}, {"probs", "labels.v2"}};
  StageTimes plain{12, 340, 400};
  StageTimes staged = plain;
  staged.decode_us = 5;
  staged.postprocess_us = 0;
  StageTimes all = staged;
  all.preprocess_us = 9;
  for (const json& id : {json(nullptr), json(0), json(uint64_t{123456789012345678}), json("ab")}) {
    for (const auto& outputs : output_sets) {
      for (const auto& names : name_sets) {
        for (const StageTimes& timing : {plain, staged, all}) {
          for (int worker : {0, 7, 2'147'483'647}) {
            const std::string text = MakeOkReply(id, outputs, names, timing, worker);
            ReplyHeader fast, full, lean;
            ASSERT_TRUE(ParseReplyHeaderFast(text, &fast)) << text;
            ASSERT_TRUE(ParseReplyHeaderJson(text, &full).ok()) << text;
            ExpectSameReply(fast, full, text);
            ASSERT_TRUE(ParseReplyHeaderLean(text, &lean).ok()) << text;
            EXPECT_TRUE(lean.raw.is_null()) << "no JSON object built for " << text;
          }
        }
      }
    }
  }
}

TEST(ProtocolReply, EverythingElseFallsBackToTheJsonParserWithRaw) {
  const std::vector<uint64_t> offsets = {64};
  const std::string cases[] = {
      MakeErrorReply(json(3), Status(StatusCode::kNotFound, "no model 'x'")),
      MakeOkReply(json(3), {{DType::kFloat32, {1}}}, StageTimes{1, 2, 3}, 0, "tok", &offsets),
      MakeOkReply(json(3), {{DType::kFloat32, {1}}}, {"a name with spaces"}, StageTimes{1, 2, 3},
                  0),
      MakeOkReply(json(-4), {{DType::kFloat32, {1}}}, StageTimes{1, 2, 3}, 0),
      R"({"v":1,"id":1,"status":"ok","models":[{"name":"m"}]})",  // a metadata answer
      R"({"v":1,"id":1,"status":"ok","outputs":[],"timing_us":{"queue":1,"compute":2,"total":3},"worker":0,"extra":1})",
      R"({"v":1,"id":1,"status":"ok","outputs":[],"timing_us":{"queue":1,"compute":2,"total":3},"worker":-1})",
      R"({"v":1,"id":1,"status":"ok","outputs":[],"timing_us":{"queue":1,"compute":2,"decode":1,"decode":2,"total":3},"worker":0})",
      R"({"v":2,"id":1,"status":"ok","outputs":[],"timing_us":{"queue":1,"compute":2,"total":3},"worker":0})",
  };
  for (const std::string& text : cases) {
    ReplyHeader fast;
    EXPECT_FALSE(ParseReplyHeaderFast(text, &fast)) << text;
    ReplyHeader lean, full;
    const Status lean_status = ParseReplyHeaderLean(text, &lean);
    const Status full_status = ParseReplyHeaderJson(text, &full);
    EXPECT_EQ(lean_status.ToString(), full_status.ToString()) << text;
    EXPECT_EQ(lean.raw, full.raw) << text;
    EXPECT_FALSE(lean.raw.is_null()) << text;
  }
  // Truncated at every byte: never accepted by the scan, never a crash.
  const std::string good = MakeOkReply(json(9), {{DType::kInt64, {2, 2}}}, StageTimes{1, 2, 3}, 1);
  for (size_t cut = 0; cut < good.size(); ++cut) {
    ReplyHeader r;
    EXPECT_FALSE(ParseReplyHeaderFast(good.substr(0, cut), &r)) << cut;
  }
}

}  // namespace
}  // namespace torchfarm
