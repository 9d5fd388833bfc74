// RequestLimits: every configurable ceiling of ParseRequestHeader and CheckInputFrames is applied
// and named in its error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/protocol.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Header(size_t inputs, std::vector<int64_t> shape = {2, 3}) {
  json list = json::array();
  for (size_t i = 0; i < inputs; ++i) list.push_back({{"dtype", "float32"}, {"shape", shape}});
  return {{"v", 1}, {"id", 9}, {"model", "m"}, {"inputs", list}};
}

TEST(ProtocolLimitsTest, DefaultsAreTheProtocolCeilings) {
  RequestLimits limits;
  EXPECT_EQ(limits.max_header_bytes, kMaxHeaderBytes);
  EXPECT_EQ(limits.max_inputs, kMaxInputs);
  EXPECT_EQ(limits.max_rank, kMaxRank);
}

TEST(ProtocolLimitsTest, HeaderBytes) {
  RequestLimits limits;
  limits.max_header_bytes = 100;
  std::string text = Header(1).dump();
  text.resize(101, ' ');
  RequestHeader h;
  Status s = ParseRequestHeader(text, &h, limits);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "header of 101 bytes exceeds the limit of 100");
  text.resize(100);
  EXPECT_TRUE(ParseRequestHeader(text, &h, limits).ok());
}

TEST(ProtocolLimitsTest, InputCount) {
  RequestLimits limits;
  limits.max_inputs = 2;
  RequestHeader h;
  EXPECT_TRUE(ParseRequestHeader(Header(2).dump(), &h, limits).ok());
  Status s = ParseRequestHeader(Header(3).dump(), &h, limits);
  EXPECT_EQ(s.message(), "header field 'inputs': 3 inputs exceed the maximum of 2");
  EXPECT_EQ(h.id, json(9)) << "the id is echoed";
}

TEST(ProtocolLimitsTest, Rank) {
  RequestLimits limits;
  limits.max_rank = 2;
  RequestHeader h;
  EXPECT_TRUE(ParseRequestHeader(Header(1, {2, 3}).dump(), &h, limits).ok());
  Status s = ParseRequestHeader(Header(1, {1, 2, 3}).dump(), &h, limits);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "inputs[0].shape: rank 3 exceeds the maximum of 2 (limits.max_rank)");
}

TEST(ProtocolLimitsTest, TensorBytesAreCheckedBeforeFrameSizes) {
  RequestLimits limits;
  limits.max_tensor_bytes = 20;
  RequestHeader h;
  ASSERT_TRUE(ParseRequestHeader(Header(1).dump(), &h, limits).ok());
  Status s = CheckInputFrames(h, {24}, limits);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "inputs[0]: float32 [2, 3] needs 24 bytes, over the limit of 20 "
            "(limits.max_tensor_bytes)");
  limits.max_tensor_bytes = 24;
  EXPECT_TRUE(CheckInputFrames(h, {24}, limits).ok());
}

TEST(ProtocolLimitsTest, HugeShapesNeverOverflow) {
  RequestHeader h;
  json j = Header(1, {int64_t{1} << 62, int64_t{1} << 62});
  ASSERT_TRUE(ParseRequestHeader(j.dump(), &h).ok());
  Status s = CheckInputFrames(h, {0});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is too large"));
}

TEST(ProtocolLimitsTest, DeepNestingIsRefusedBeforeParsing) {
  // Found by the fuzzer (tests/fuzz/regressions/deep-id-*): copying such an id overflowed the
  // stack.
  std::string deep = std::string(10'000, '[') + std::string(10'000, ']');
  json j = Header(1);
  std::string text = j.dump();
  text.insert(1, "\"id\":" + deep + ",");
  RequestHeader h;
  Status s = ParseRequestHeader(text, &h);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "header nests arrays or objects deeper than 32 levels");

  EXPECT_TRUE(JsonNestingWithin("[[[\"]]]]]][[[[[[\\\"[[[[[[\"]]]", 3)) << "strings do not count";
  EXPECT_FALSE(JsonNestingWithin("{\"a\":[{\"b\":[1]}]}", 3));
  EXPECT_TRUE(JsonNestingWithin("{\"a\":[{\"b\":[1]}]}", 4));
  j["id"] = json::parse(std::string(31, '[') + std::string(31, ']'));  // 32 with the header
  EXPECT_TRUE(ParseRequestHeader(j.dump(), &h).ok());
}

}  // namespace
}  // namespace torchfarm
