// EncodeBatch and ExpectedResponse: batches of PendingRequests written into a request slot and
// read back as the worker reads them (ipc::ReadRequest); client regions are real POSIX objects.
#include "supervisor/workers/batch_encoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "supervisor/workers/worker_slot.h"

namespace torchfarm {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kCapacity = 4096;

// A request slot's worth of memory, cache-line aligned like a ring's.
struct SlotMemory {
  SlotMemory() : bytes(static_cast<uint8_t*>(std::aligned_alloc(ipc::kCacheLine, kBytes))) {
    std::memset(bytes, 0, kBytes);
  }
  ~SlotMemory() { std::free(bytes); }
  static constexpr size_t kBytes = sizeof(ipc::SlotHeader) + kCapacity;
  uint8_t* bytes;
};

std::shared_ptr<ipc::SharedRegion> Region(const std::string& tag, uint64_t bytes = 4096) {
  std::unique_ptr<ipc::SharedRegion> region;
  const std::string name = "/torchfarm-" + std::to_string(::getpid()) + "-encoder-test-" + tag;
  EXPECT_TRUE(ipc::SharedRegion::Create(name, bytes, 0600, -1, &region).ok());
  return std::shared_ptr<ipc::SharedRegion>(std::move(region));
}

// A request of `rows` rows of one float32 [rows, 2] input, every byte `fill`.
PendingRequest Framed(int64_t rows, uint8_t fill) {
  PendingRequest r;
  r.inputs = {TensorSpec{DType::kFloat32, {rows, 2}}};
  r.rows = rows;
  r.frames.emplace_back(static_cast<size_t>(rows * 8));
  std::memset(r.frames.back().data(), fill, r.frames.back().size());
  return r;
}

// Input 0 of `r` moved into `region` at `offset` (as ParseJob resolves an input's shm ref).
void InRegion(const std::shared_ptr<ipc::SharedRegion>& region, uint64_t offset,
              PendingRequest* r) {
  const size_t bytes = r->frames[0].size();
  std::memcpy(region->data() + offset, r->frames[0].data(), bytes);
  r->input_shm = {ShmRef{"token", offset, 0}};
  r->input_regions = {region};
  r->frames[0] = zmq::message_t(region->data() + offset, bytes, nullptr, nullptr);
}

void OutputTo(const std::shared_ptr<ipc::SharedRegion>& region, uint64_t offset, uint64_t bytes,
              PendingRequest* r) {
  r->output_shm = ShmRef{"token", offset, bytes};
  r->output_region = region;
}

InflightBatch Batch(std::vector<PendingRequest> requests) {
  InflightBatch batch;
  batch.batch_id = 40;
  for (auto& r : requests) {
    batch.rows += r.rows;
    batch.requests.push_back(std::make_unique<PendingRequest>(std::move(r)));
  }
  return batch;
}

ipc::RequestView ReadBack(const SlotMemory& slot) {
  ipc::RequestView view;
  Status s = ipc::ReadRequest(slot.bytes, kCapacity, &view);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return view;
}

TEST(BatchEncoder, ConcatenatesTheRequestsOfABatch) {
  std::vector<PendingRequest> requests;
  requests.push_back(Framed(1, 1));
  requests.push_back(Framed(2, 2));
  InflightBatch batch = Batch(std::move(requests));
  SlotMemory slot;
  BatchEncoding encoding = EncodeBatch(batch, /*shm_in_place=*/true, slot.bytes, kCapacity);
  EXPECT_FALSE(encoding.in_place) << "only a batch of one request goes in place";
  ipc::RequestView view = ReadBack(slot);
  EXPECT_EQ(view.batch_id, 40u);
  ASSERT_EQ(view.inputs.size(), 1u);
  EXPECT_EQ(view.inputs[0].spec, (TensorSpec{DType::kFloat32, {3, 2}}));
  const uint8_t* bytes = view.InputBytes(0, nullptr);
  EXPECT_EQ(bytes[7], 1);
  EXPECT_EQ(bytes[8], 2);
  EXPECT_EQ(bytes[23], 2);

  ipc::ResponseExpectation expected = ExpectedResponse(batch, kCapacity);
  EXPECT_EQ(expected.batch_id, 40u);
  EXPECT_EQ(expected.batch_rows, 3);
  EXPECT_FALSE(expected.outputs_in_place);
}

TEST(BatchEncoder, ARequestAloneGoesInPlaceWhenAllowed) {
  auto inputs = Region("in"), outputs = Region("out");
  PendingRequest r = Framed(2, 9);
  InRegion(inputs, 128, &r);
  OutputTo(outputs, 64, 512, &r);
  std::vector<PendingRequest> one;
  one.push_back(std::move(r));
  InflightBatch batch = Batch(std::move(one));

  SlotMemory slot;
  BatchEncoding encoding = EncodeBatch(batch, /*shm_in_place=*/true, slot.bytes, kCapacity);
  EXPECT_TRUE(encoding.in_place);
  EXPECT_TRUE(encoding.outputs_in_place);
  ipc::RequestView view = ReadBack(slot);
  ASSERT_EQ(view.regions.size(), 2u);
  EXPECT_EQ(std::string(view.regions[0].name), inputs->name());
  EXPECT_EQ(view.inputs[0].location, 1);
  EXPECT_EQ(view.inputs[0].offset, 128u);
  EXPECT_EQ(view.output_region, 2u);
  EXPECT_EQ(view.output_offset, 64u);
  batch.in_place = encoding.in_place;
  batch.outputs_in_place = encoding.outputs_in_place;
  ipc::ResponseExpectation expected = ExpectedResponse(batch, kCapacity);
  EXPECT_TRUE(expected.outputs_in_place);
  EXPECT_EQ(expected.output_offset, 64u);
  EXPECT_EQ(expected.output_bytes, 512u);
  EXPECT_EQ(expected.batch_rows, 0) << "a batch of one keeps whatever dim 0 the model returns";

  SlotMemory copied;
  encoding = EncodeBatch(batch, /*shm_in_place=*/false, copied.bytes, kCapacity);
  EXPECT_FALSE(encoding.in_place);
  view = ReadBack(copied);
  EXPECT_TRUE(view.regions.empty());
  EXPECT_TRUE(view.inputs[0].in_slot());
  EXPECT_EQ(view.InputBytes(0, nullptr)[15], 9) << "the region's bytes copied into the slot";
}

TEST(BatchEncoder, OutputsOverAnInputGoThroughTheResponseSlot) {
  auto region = Region("shared");
  PendingRequest r = Framed(2, 3);
  InRegion(region, 0, &r);
  OutputTo(region, 8, 64, &r);  // overlaps the input's 16 bytes
  std::vector<PendingRequest> one;
  one.push_back(std::move(r));
  SlotMemory slot;
  BatchEncoding encoding = EncodeBatch(Batch(std::move(one)), true, slot.bytes, kCapacity);
  EXPECT_TRUE(encoding.in_place);
  EXPECT_FALSE(encoding.outputs_in_place);
  EXPECT_EQ(ReadBack(slot).output_region, 0u);
}

TEST(BatchEncoder, MoreRegionsThanASlotNamesAreCopied) {
  PendingRequest r;
  for (int i = 0; i <= ipc::kMaxClientRegions; ++i) {
    PendingRequest part = Framed(1, static_cast<uint8_t>(i));
    auto region = Region("many" + std::to_string(i));
    InRegion(region, 0, &part);
    r.inputs.push_back(part.inputs[0]);
    r.frames.push_back(std::move(part.frames[0]));
    r.input_shm.push_back(part.input_shm[0]);
    r.input_regions.push_back(region);
  }
  std::vector<PendingRequest> one;
  one.push_back(std::move(r));
  SlotMemory slot;
  BatchEncoding encoding = EncodeBatch(Batch(std::move(one)), true, slot.bytes, kCapacity);
  EXPECT_FALSE(encoding.in_place);
  ipc::RequestView view = ReadBack(slot);
  EXPECT_TRUE(view.regions.empty());
  ASSERT_EQ(view.inputs.size(), static_cast<size_t>(ipc::kMaxClientRegions + 1));
  EXPECT_EQ(view.InputBytes(4, nullptr)[0], 4);
}

TEST(BatchEncoder, ABatchTheSlotCannotHoldIsRefusedNotWritten) {
  std::vector<PendingRequest> requests;
  requests.push_back(Framed(300, 1));
  requests.push_back(Framed(300, 2));  // 4800 bytes in all
  SlotMemory slot;
  BatchEncoding encoding = EncodeBatch(Batch(std::move(requests)), true, slot.bytes, kCapacity);
  EXPECT_FALSE(encoding.in_place);
  ipc::RequestView view;
  Status s = ipc::ReadRequest(slot.bytes, kCapacity, &view);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("raise slot_bytes"));
  EXPECT_EQ(view.batch_id, 40u) << "the worker answers the batch with the refusal";
}

}  // namespace
}  // namespace torchfarm
