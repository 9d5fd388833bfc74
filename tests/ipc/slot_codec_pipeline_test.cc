// The slot codec's parts for the worker pipeline (worker/pipeline_stages.h): a bytes input, whose
// size is in its items, through a request slot; and the PipelineReport of an OK response (stage
// times, failed rows), including the malformed reports a reader rejects.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "common/bytes_items.h"
#include "ipc/slot_codec.h"

namespace torchfarm::ipc {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kPipelineCapacity = 4096;

struct FreeSlot {
  void operator()(uint8_t* p) const { std::free(p); }
};
using SlotBytes = std::unique_ptr<uint8_t, FreeSlot>;

SlotBytes NewSlot() {
  SlotBytes slot(static_cast<uint8_t*>(
      std::aligned_alloc(kCacheLine, sizeof(SlotHeader) + kPipelineCapacity)));
  std::memset(slot.get(), 0, sizeof(SlotHeader) + kPipelineCapacity);
  return slot;
}

TEST(SlotCodecPipelineTest, ABytesInputOfTwoRequestsTravelsAsTheirConcatenatedItems) {
  std::string first, second;
  AppendBytesItem("jpeg-a", &first);
  AppendBytesItem("jpeg-bb", &second);
  AppendBytesItem("", &second);
  RequestBatch batch;
  batch.batch_id = 5;
  RequestInput input;
  input.spec = TensorSpec{DType::kBytes, {3}};
  input.parts = {TensorPart{reinterpret_cast<const uint8_t*>(first.data()), first.size()},
                 TensorPart{reinterpret_cast<const uint8_t*>(second.data()), second.size()}};
  batch.inputs.push_back(input);
  SlotBytes slot = NewSlot();
  ASSERT_TRUE(WriteRequest(batch, slot.get(), kPipelineCapacity, nullptr).ok());
  RequestView view;
  ASSERT_TRUE(ReadRequest(slot.get(), kPipelineCapacity, &view).ok());
  ASSERT_EQ(view.inputs.size(), 1u);
  EXPECT_EQ(view.inputs[0].spec, input.spec);
  EXPECT_EQ(view.inputs[0].nbytes, first.size() + second.size());
  const std::string_view written(reinterpret_cast<const char*>(view.InputBytes(0, nullptr)),
                                 view.inputs[0].nbytes);
  std::vector<std::string_view> items;
  ASSERT_TRUE(SplitBytesItems(written, 3, 100, "in", &items).ok());
  EXPECT_EQ(items[0], "jpeg-a");
  EXPECT_EQ(items[1], "jpeg-bb");
  EXPECT_EQ(items[2], "");
  // Too large for the slot: refused like any other input.
  std::string big;
  AppendBytesItem(std::string(kPipelineCapacity, 'x'), &big);
  batch.inputs[0].spec.shape = {1};
  batch.inputs[0].parts = {TensorPart{reinterpret_cast<const uint8_t*>(big.data()), big.size()}};
  EXPECT_THAT(WriteRequest(batch, slot.get(), kPipelineCapacity, nullptr).message(),
              HasSubstr("raise slot_bytes"));
}

TEST(SlotCodecPipelineTest, AnOkResponseCarriesStageTimesAndFailedRows) {
  SlotBytes request = NewSlot();
  WriteRefusal(9, Internal("placeholder"), request.get());
  SlotHeaderOf(request.get())->status = 0;
  SlotBytes response = NewSlot();
  BeginResponse(request.get(), response.get());
  PipelineOutcome outcome;
  outcome.decode_us = 11;
  outcome.preprocess_us = 22;
  outcome.postprocess_us = -1;
  outcome.row_failures = {RowFailure{2, InvalidArgument("corrupt JPEG: " + std::string(200, 'z'))}};
  FinishResponse(Status::Ok(), 100, response.get(), &outcome);
  ResponseExpectation expected;
  expected.batch_id = 9;
  expected.data_capacity = kPipelineCapacity;
  expected.batch_rows = 4;
  expected.total_rows = 4;
  ResponseView view;
  ASSERT_TRUE(ReadResponse(response.get(), expected, &view).ok());
  ASSERT_TRUE(view.has_pipeline);
  EXPECT_EQ(view.pipeline.decode_us, 11);
  EXPECT_EQ(view.pipeline.preprocess_us, 22);
  EXPECT_EQ(view.pipeline.postprocess_us, -1);
  ASSERT_EQ(view.pipeline.row_failures.size(), 1u);
  EXPECT_EQ(view.pipeline.row_failures[0].row, 2);
  EXPECT_EQ(view.pipeline.row_failures[0].status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(view.pipeline.row_failures[0].status.message().size(), kRowErrorTextBytes - 1);
  // A response without a report reads as none.
  FinishResponse(Status::Ok(), 100, response.get());
  ASSERT_TRUE(ReadResponse(response.get(), expected, &view).ok());
  EXPECT_FALSE(view.has_pipeline);
}

TEST(SlotCodecPipelineTest, MalformedReportsAreRejectedWithWhatWasRead) {
  SlotBytes request = NewSlot();
  WriteRefusal(3, Internal("x"), request.get());
  SlotHeaderOf(request.get())->status = 0;
  SlotBytes response = NewSlot();
  BeginResponse(request.get(), response.get());
  PipelineOutcome outcome;
  outcome.row_failures = {RowFailure{1, InvalidArgument("bad")}};
  FinishResponse(Status::Ok(), 1, response.get(), &outcome);
  ResponseExpectation expected;
  expected.batch_id = 3;
  expected.data_capacity = kPipelineCapacity;
  expected.total_rows = 1;  // row 1 is outside a 1-row batch
  ResponseView view;
  EXPECT_THAT(ReadResponse(response.get(), expected, &view).message(),
              HasSubstr("failed row 1 with status 1; expected a row below 1"));
  PipelineReport report;
  std::memcpy(&report, SlotHeaderOf(response.get())->message, sizeof(report));
  report.row_error_count = kMaxRowErrors + 1;
  std::memcpy(SlotHeaderOf(response.get())->message, &report, sizeof(report));
  expected.total_rows = 8;
  EXPECT_THAT(ReadResponse(response.get(), expected, &view).message(),
              HasSubstr("names 5 failed rows; expected at most 4"));
}

}  // namespace
}  // namespace torchfarm::ipc
