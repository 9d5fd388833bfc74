// The shared-memory parts of the wire protocol: input and output references, the shm_create and
// shm_release commands, where outputs land in a range, and replies that name them.
#include "common/shm_reference.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/protocol.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Header() {
  return json{{"v", 1},
              {"id", 5},
              {"model", "pair"},
              {"inputs", json::array({{{"dtype", "float32"}, {"shape", {2, 4}},
                                       {"shm", {{"region", "tok"}, {"offset", 128}}}},
                                      {{"dtype", "int64"}, {"shape", {2}}}})},
              {"output_shm", {{"region", "tok"}, {"offset", 4096}, {"bytes", 1024}}}};
}

Status ParseShmHeader(const json& j, RequestHeader* out) {
  return ParseRequestHeader(j.dump(), out);
}

TEST(ShmReferenceTest, ParsesInputAndOutputReferences) {
  RequestHeader h;
  ASSERT_TRUE(ParseShmHeader(Header(), &h).ok());
  ASSERT_EQ(h.inputs.size(), 2u);
  EXPECT_EQ(h.inputs[0], (TensorSpec{DType::kFloat32, {2, 4}}));
  ASSERT_EQ(h.input_shm.size(), 2u);
  EXPECT_TRUE(h.input_in_shm(0));
  EXPECT_FALSE(h.input_in_shm(1));
  EXPECT_EQ(h.input_shm[0].region, "tok");
  EXPECT_EQ(h.input_shm[0].offset, 128u);
  EXPECT_TRUE(h.output_shm.used());
  EXPECT_EQ(h.output_shm.offset, 4096u);
  EXPECT_EQ(h.output_shm.bytes, 1024u);
  EXPECT_EQ(h.op, RequestOp::kInfer);
}

TEST(ShmReferenceTest, FramesCountOnlyInputsOutsideSharedMemory) {
  RequestHeader h;
  ASSERT_TRUE(ParseShmHeader(Header(), &h).ok());
  EXPECT_TRUE(CheckInputFrames(h, {16}).ok());
  Status s = CheckInputFrames(h, {32, 16});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("1 of them in shared memory"));
  s = CheckInputFrames(h, {15});
  EXPECT_THAT(s.message(), HasSubstr("inputs[1]: int64 [2] needs 16 bytes, frame 1 has 15"));
  RequestLimits limits;
  limits.max_tensor_bytes = 16;  // the shm input (32 bytes) is bounded like a frame
  s = CheckInputFrames(h, {16}, limits);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("inputs[0]"));
}

TEST(ShmReferenceTest, MalformedReferencesNameTheField) {
  struct Case {
    std::function<void(json&)> edit;
    std::string words;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["inputs"][0]["shm"] = "tok"; }, "inputs[0].shm: expected an object"},
      {[](json& j) { j["inputs"][0]["shm"].erase("region"); },
       "inputs[0].shm.region: expected the token shm_create returned, got nothing"},
      {[](json& j) { j["inputs"][0]["shm"]["offset"] = -1; },
       "inputs[0].shm.offset: expected an integer in 0..9223372036854775807, got number -1"},
      {[](json& j) { j["inputs"][0]["shm"]["bytes"] = 4; },
       "inputs[0].shm: unknown key 'bytes'"},
      {[](json& j) { j["output_shm"].erase("bytes"); },
       "output_shm'.bytes: expected an integer in 0..9223372036854775807, got nothing"},
      {[](json& j) { j["output_shm"]["offset"] = 100; },
       "offset: expected a multiple of 64, got 100"},
      {[](json& j) { j["op"] = "shm_delete"; },
       "header field 'op': expected \"infer\", \"shm_create\" or \"shm_release\", got \"shm_delete\""},
  };
  for (const auto& c : cases) {
    json j = Header();
    c.edit(j);
    RequestHeader h;
    Status s = ParseShmHeader(j, &h);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << j.dump();
    EXPECT_THAT(s.message(), HasSubstr(c.words)) << j.dump();
  }
}

TEST(ShmReferenceTest, ParsesCommands) {
  RequestHeader h;
  ASSERT_TRUE(
      ParseShmHeader(json{{"v", 1}, {"id", 1}, {"op", "shm_create"}, {"bytes", 4096}}, &h).ok());
  EXPECT_EQ(h.op, RequestOp::kShmCreate);
  EXPECT_EQ(h.shm_bytes, 4096u);
  EXPECT_EQ(h.id, 1);
  ASSERT_TRUE(ParseShmHeader(json{{"v", 1}, {"op", "shm_release"}, {"region", "abc"}}, &h).ok());
  EXPECT_EQ(h.op, RequestOp::kShmRelease);
  EXPECT_EQ(h.shm_region, "abc");
  // "infer" is the default op, spelled out.
  json infer = Header();
  infer["op"] = "infer";
  ASSERT_TRUE(ParseShmHeader(infer, &h).ok());
  EXPECT_EQ(h.op, RequestOp::kInfer);

  Status s = ParseShmHeader(json{{"v", 1}, {"op", "shm_create"}, {"bytes", 0}}, &h);
  EXPECT_THAT(s.message(), HasSubstr("'bytes': expected an integer in 1..9223372036854775807, got number 0"));
  s = ParseShmHeader(json{{"v", 1}, {"op", "shm_create"}, {"bytes", 8}, {"model", "m"}}, &h);
  EXPECT_THAT(s.message(), HasSubstr("shm_create: unknown field 'model' (expected v, id, op, bytes)"));
  s = ParseShmHeader(json{{"v", 1}, {"op", "shm_release"}}, &h);
  EXPECT_THAT(s.message(), HasSubstr("'region': expected the token shm_create returned, got nothing"));
}

TEST(ShmReferenceTest, PlacesOutputsAtAlignedOffsetsAfterEachOther) {
  std::vector<uint64_t> offsets;
  const std::vector<TensorSpec> outputs = {{DType::kFloat32, {2, 3}},  // 24 bytes
                                           {DType::kInt64, {5}},       // 40 bytes
                                           {DType::kUInt8, {1}}};
  ShmRef range{"tok", 4096, 64 + 64 + 1};
  ASSERT_TRUE(PlaceOutputs(outputs, range, &offsets).ok());
  EXPECT_EQ(offsets, (std::vector<uint64_t>{4096, 4160, 4224}));
  range.bytes = 128;
  Status s = PlaceOutputs(outputs, range, &offsets);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("outputs need 129 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("output_shm.bytes is 128"));
}

TEST(ShmReferenceTest, OkReplyNamesWhereOutputsWentAndParsesBack) {
  const std::vector<TensorSpec> outputs = {{DType::kFloat32, {1, 2}}, {DType::kInt64, {3}}};
  const std::vector<uint64_t> offsets = {0, 64};
  std::string text = MakeOkReply(7, outputs, StageTimes{1, 2, 3}, 4, "abc", &offsets);
  json j = json::parse(text);
  EXPECT_EQ(j["outputs"][1]["shm"], (json{{"region", "abc"}, {"offset", 64}}));
  ReplyHeader reply;
  ASSERT_TRUE(ParseReplyHeader(text, &reply).ok());
  EXPECT_TRUE(reply.status.ok());
  EXPECT_EQ(reply.outputs, outputs);
  ASSERT_EQ(reply.output_shm.size(), 2u);
  EXPECT_EQ(reply.output_shm[1].region, "abc");
  EXPECT_EQ(reply.output_shm[1].offset, 64u);
  // Without offsets the reply is the usual one.
  ASSERT_TRUE(ParseReplyHeader(MakeOkReply(7, outputs, StageTimes{}, 4), &reply).ok());
  EXPECT_TRUE(reply.output_shm.empty());
}

TEST(ShmReferenceTest, CommandReplies) {
  json created = json::parse(MakeShmCreatedReply(3, "tok", "/torchfarm-1-c0-ab", 4096));
  EXPECT_EQ(created["status"], "ok");
  EXPECT_EQ(created["id"], 3);
  EXPECT_EQ(created["shm"], (json{{"region", "tok"}, {"name", "/torchfarm-1-c0-ab"}, {"bytes", 4096}}));
  json released = json::parse(MakeShmReleasedReply("x"));
  EXPECT_EQ(released, (json{{"v", 1}, {"id", "x"}, {"status", "ok"}}));
}

}  // namespace
}  // namespace torchfarm
