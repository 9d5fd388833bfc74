// The bytes dtype (DType::kBytes) and its item layout (common/bytes_items.h), and how the request
// checks of common/protocol.h treat a bytes input.
#include "common/bytes_items.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/protocol.h"

namespace torchfarm {
namespace {

using ::testing::HasSubstr;

std::string Items(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) AppendBytesItem(item, &out);
  return out;
}

TEST(BytesItemsTest, TheDTypeKeepsItsSharedMemoryCodeAndHasNoShapeSize) {
  EXPECT_EQ(static_cast<int>(DType::kBytes), 11);  // part of the shared-memory layout
  EXPECT_EQ(ParseDType("bytes"), DType::kBytes);
  EXPECT_EQ(DTypeFromCode(11), DType::kBytes);
  EXPECT_EQ(V2DatatypeName(DType::kBytes), "BYTES");
  EXPECT_FALSE(DTypeFromV2Name("BYTES"));  // the v2 front ends do not take it yet
  EXPECT_THAT(AllV2DatatypeNames(), ::testing::Not(HasSubstr("BYTES")));
  EXPECT_FALSE(ByteSize(TensorSpec{DType::kBytes, {3}}));
  EXPECT_TRUE(IsBytes(DType::kBytes));
  EXPECT_FALSE(IsBytes(DType::kUInt8));
}

TEST(BytesItemsTest, ItemsRoundTripIncludingEmptyOnes) {
  const std::string buffer = Items({"abc", "", std::string(300, 'x')});
  EXPECT_EQ(buffer.size(), 3 * kBytesLengthPrefix + 3 + 300);
  EXPECT_EQ(buffer.substr(0, 4), std::string("\x03\x00\x00\x00", 4));  // little-endian length
  EXPECT_EQ(buffer.substr(7 + 4, 4), std::string("\x2c\x01\x00\x00", 4));
  std::vector<std::string_view> items;
  ASSERT_TRUE(SplitBytesItems(buffer, 3, 300, "in", &items).ok());
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0], "abc");
  EXPECT_EQ(items[1], "");
  EXPECT_EQ(items[2], std::string(300, 'x'));
  EXPECT_TRUE(SplitBytesItems("", 0, 1, "in", &items).ok());
}

TEST(BytesItemsTest, MalformedBuffersNameTheItemAndWhatWasWrong) {
  std::vector<std::string_view> items;
  const std::string two = Items({"ab", "cd"});
  EXPECT_THAT(SplitBytesItems(two, 3, 100, "inputs[0]", &items).message(),
              HasSubstr("inputs[0]: expected 3 length-prefixed items, got 2"));
  EXPECT_THAT(SplitBytesItems(two, 1, 100, "inputs[0]", &items).message(),
              HasSubstr("expected 1 length-prefixed items, the data holds more"));
  EXPECT_THAT(SplitBytesItems(two.substr(0, two.size() - 1), 2, 100, "inputs[0]", &items).message(),
              HasSubstr("inputs[0] item 1: its length says 2 bytes, 1 are left"));
  EXPECT_THAT(SplitBytesItems(two.substr(0, 8), 2, 100, "inputs[0]", &items).message(),
              HasSubstr("inputs[0] item 1: expected a 4-byte length, 2 bytes are left"));
  // max_item_bytes at its limit and one past it.
  EXPECT_TRUE(SplitBytesItems(two, 2, 2, "inputs[0]", &items).ok());
  Status over = SplitBytesItems(two, 2, 1, "inputs[0]", &items);
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(),
              HasSubstr("item 0: 2 bytes, over the limit of 1 (limits.max_item_bytes)"));
  EXPECT_THAT(CheckBytesTensor(TensorSpec{DType::kBytes, {}}, two, 9, "x").message(),
              HasSubstr("a bytes tensor has rank 1 or more"));
  EXPECT_TRUE(CheckBytesTensor(TensorSpec{DType::kBytes, {1, 2}}, two, 9, "x").ok());
}

TEST(BytesItemsTest, RequestChecksTakeTheFrameAndCheckItsItems) {
  RequestHeader header;
  header.inputs = {TensorSpec{DType::kBytes, {2}}};
  const std::string frame = Items({"jpeg-1", "jpeg-22"});
  RequestLimits limits;
  limits.max_item_bytes = 7;
  EXPECT_TRUE(CheckInputFrames(header, {frame.size()}, limits).ok());
  EXPECT_TRUE(CheckBytesFrames(header, {frame}, limits).ok());
  limits.max_item_bytes = 6;
  EXPECT_THAT(CheckBytesFrames(header, {frame}, limits).message(),
              HasSubstr("inputs[0] item 1: 7 bytes, over the limit of 6 (limits.max_item_bytes)"));
  limits.max_tensor_bytes = frame.size() - 1;
  EXPECT_THAT(CheckInputFrames(header, {frame.size()}, limits).message(),
              HasSubstr("(limits.max_tensor_bytes)"));
  header.inputs = {TensorSpec{DType::kBytes, {3}}};
  EXPECT_THAT(CheckBytesFrames(header, {frame}, RequestLimits{}).message(),
              HasSubstr("expected 3 length-prefixed items, got 2"));
  header.input_shm = {ShmRef{"/r", 0, 0}};
  EXPECT_THAT(CheckInputFrames(header, {}, RequestLimits{}).message(),
              HasSubstr("a bytes input travels as a data frame, not in shared memory"));
}

TEST(BytesItemsTest, RepliesCarryPipelineStageTimesOnlyWhenMeasured) {
  StageTimes plain{1, 2, 3};
  std::string reply = MakeOkReply(nullptr, {}, plain, 0);
  EXPECT_THAT(reply, ::testing::Not(HasSubstr("decode")));
  StageTimes staged = plain;
  staged.decode_us = 10;
  staged.preprocess_us = 20;
  staged.postprocess_us = 30;
  reply = MakeOkReply(nullptr, {}, staged, 0);
  ReplyHeader parsed;
  ASSERT_TRUE(ParseReplyHeader(reply, &parsed).ok()) << reply;
  EXPECT_EQ(parsed.timing.decode_us, 10);
  EXPECT_EQ(parsed.timing.preprocess_us, 20);
  EXPECT_EQ(parsed.timing.postprocess_us, 30);
  EXPECT_EQ(parsed.timing.total_us, 3);
}

}  // namespace
}  // namespace torchfarm
