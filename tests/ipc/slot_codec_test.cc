// The slot codec on plain memory: requests and responses written and read back, the refusals of
// what a slot cannot hold, and every malformed descriptor a reader rejects, with its message.
#include "ipc/slot_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "common/shm_reference.h"
#include "ipc/guarded_copy.h"
#include "ipc/shared_region.h"

namespace torchfarm::ipc {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kCapacity = 4096;

// One slot of `capacity` data bytes, cache-line aligned like a ring's, data area filled with 0xAB
// so a test can tell what was written.
class Slot {
 public:
  explicit Slot(uint64_t capacity = kCapacity)
      : capacity_(capacity),
        bytes_(
            static_cast<uint8_t*>(std::aligned_alloc(kCacheLine, sizeof(SlotHeader) + capacity))) {
    std::memset(bytes_.get(), 0, sizeof(SlotHeader));
    std::memset(SlotData(bytes_.get()), 0xAB, capacity);
  }
  uint8_t* get() { return bytes_.get(); }
  SlotHeader* header() { return SlotHeaderOf(bytes_.get()); }
  uint8_t* data() { return SlotData(bytes_.get()); }
  uint64_t capacity() const { return capacity_; }
  bool DataUntouched() {
    for (uint64_t i = 0; i < capacity_; ++i) {
      if (data()[i] != 0xAB) return false;
    }
    return true;
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  uint64_t capacity_;
  std::unique_ptr<uint8_t, Free> bytes_;
};

std::vector<uint8_t> Bytes(size_t n, uint8_t first) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

RequestInput Input(TensorSpec spec, const std::vector<const std::vector<uint8_t>*>& parts) {
  RequestInput input;
  input.spec = std::move(spec);
  for (const auto* part : parts)
    input.parts.push_back(TensorPart{part->data(), part->size(), false});
  return input;
}

// A request slot written by hand: one float32 [2, 2] input at offset 0.
void WriteOneInputByHand(Slot* slot) {
  SlotHeader* h = slot->header();
  h->batch_id = 9;
  h->tensor_count = 1;
  FillTensorDesc(TensorSpec{DType::kFloat32, {2, 2}}, 0, 16, &h->tensors[0]);
}

// Names one client region, "/r" of `bytes` bytes, in a request header.
void NameOneRegion(SlotHeader* h, uint64_t bytes) {
  h->region_count = 1;
  std::strcpy(h->regions[0].name, "/r");
  h->regions[0].bytes = bytes;
}

Status Read(Slot& slot, RequestView* view = nullptr) {
  RequestView ignored;
  return ReadRequest(slot.get(), slot.capacity(), view ? view : &ignored);
}

TEST(SlotCodec, TensorDescRoundTrip) {
  TensorDesc desc;
  TensorSpec spec{DType::kBFloat16, {3, 4, 5}};
  FillTensorDesc(spec, 128, 120, &desc);
  TensorSpec back;
  ASSERT_TRUE(ReadTensorDesc(desc, &back));
  EXPECT_EQ(back, spec);
  EXPECT_EQ(desc.offset, 128u);
  desc.dtype = 200;
  EXPECT_FALSE(ReadTensorDesc(desc, &back));
}

TEST(SlotCodec, BatchOfSeveralRequestsRoundTrips) {
  // Three requests of 1, 2 and 1 rows; two inputs each: float32 [r, 3] and int64 [r].
  auto a0 = Bytes(12, 0), b0 = Bytes(24, 50), c0 = Bytes(12, 100);
  auto a1 = Bytes(8, 200), b1 = Bytes(16, 210), c1 = Bytes(8, 230);
  RequestBatch batch;
  batch.batch_id = 77;
  batch.inputs.push_back(Input(TensorSpec{DType::kFloat32, {4, 3}}, {&a0, &b0, &c0}));
  batch.inputs.push_back(Input(TensorSpec{DType::kInt64, {4}}, {&a1, &b1, &c1}));
  Slot slot;
  RequestWriteReport report;
  ASSERT_TRUE(WriteRequest(batch, slot.get(), slot.capacity(), &report).ok());
  EXPECT_TRUE(report.zero_filled.empty());

  RequestView view;
  Status s = Read(slot, &view);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(view.batch_id, 77u);
  ASSERT_EQ(view.inputs.size(), 2u);
  EXPECT_EQ(view.inputs[0].spec, (TensorSpec{DType::kFloat32, {4, 3}}));
  EXPECT_EQ(view.inputs[1].spec, (TensorSpec{DType::kInt64, {4}}));
  EXPECT_EQ(view.inputs[0].offset, 0u);
  EXPECT_EQ(view.inputs[1].offset, 64u) << "48 bytes, then the next multiple of 64";
  EXPECT_TRUE(view.regions.empty());
  EXPECT_EQ(view.output_region, 0u);
  std::vector<uint8_t> want0 = a0, want1 = a1;
  want0.insert(want0.end(), b0.begin(), b0.end());
  want0.insert(want0.end(), c0.begin(), c0.end());
  want1.insert(want1.end(), b1.begin(), b1.end());
  want1.insert(want1.end(), c1.begin(), c1.end());
  EXPECT_EQ(std::memcmp(view.InputBytes(0, nullptr), want0.data(), want0.size()), 0);
  EXPECT_EQ(std::memcmp(view.InputBytes(1, nullptr), want1.data(), want1.size()), 0);
  EXPECT_EQ(RequestDataBytes({48, 32}), 128u);
}

TEST(SlotCodec, InPlaceRequestNamesItsRegions) {
  std::vector<uint8_t> region_a(1024), region_b(512);
  auto framed = Bytes(16, 1);
  RequestBatch batch;
  batch.batch_id = 5;
  EXPECT_EQ(AddClientRegion("/tf-a", region_a.size(), &batch), 0);
  EXPECT_EQ(AddClientRegion("/tf-b", region_b.size(), &batch), 1);
  EXPECT_EQ(AddClientRegion("/tf-a", region_a.size(), &batch), 0) << "one entry per name";
  RequestInput in_a;
  in_a.spec = TensorSpec{DType::kUInt8, {2, 8}};
  in_a.region = 0;
  in_a.region_offset = 100;
  RequestInput in_b = in_a;
  in_b.region = 1;
  in_b.region_offset = 0;
  batch.inputs = {in_a, Input(TensorSpec{DType::kUInt8, {2, 8}}, {&framed}), in_b};
  batch.output_region = 1;
  batch.output_offset = 256;
  batch.output_bytes = 256;
  Slot slot;
  ASSERT_TRUE(WriteRequest(batch, slot.get(), slot.capacity(), nullptr).ok());

  RequestView view;
  Status s = Read(slot, &view);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(view.regions.size(), 2u);
  EXPECT_STREQ(view.regions[0].name, "/tf-a");
  EXPECT_EQ(view.regions[1].bytes, 512u);
  EXPECT_FALSE(view.inputs[0].in_slot());
  EXPECT_EQ(view.inputs[0].region_index(), 0u);
  EXPECT_EQ(view.InputBytes(0, region_a.data()), region_a.data() + 100);
  EXPECT_TRUE(view.inputs[1].in_slot());
  EXPECT_EQ(view.inputs[1].offset, 0u) << "only copied inputs take slot space";
  EXPECT_EQ(view.InputBytes(2, region_b.data()), region_b.data());
  EXPECT_EQ(view.output_region, 2u);
  EXPECT_EQ(view.output_offset, 256u);
  EXPECT_EQ(view.output_bytes, 256u);
}

TEST(SlotCodec, RegionTableRefusesWhatASlotCannotName) {
  RequestBatch batch;
  for (int k = 0; k < kMaxClientRegions; ++k) {
    EXPECT_EQ(AddClientRegion("/r" + std::to_string(k), 64, &batch), k);
  }
  EXPECT_EQ(AddClientRegion("/one-too-many", 64, &batch), -1);
  RequestBatch other;
  EXPECT_EQ(AddClientRegion("/" + std::string(kRegionNameBytes - 1, 'x'), 64, &other), -1);
  EXPECT_EQ(AddClientRegion("", 64, &other), -1);
  EXPECT_TRUE(other.regions.empty());
}

// Every refusal: an error, no tensor byte written, and a slot the worker answers with the error.
void ExpectRefused(const RequestBatch& batch, uint64_t capacity, StatusCode code,
                   const std::string& text) {
  Slot slot(capacity);
  Status s = WriteRequest(batch, slot.get(), slot.capacity(), nullptr);
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr(text));
  EXPECT_TRUE(slot.DataUntouched());
  EXPECT_EQ(slot.header()->tensor_count, 0u);
  RequestView view;
  Status read = Read(slot, &view);
  EXPECT_EQ(read.code(), code);
  EXPECT_EQ(read.message(), s.message());
  EXPECT_EQ(view.batch_id, batch.batch_id);
}

TEST(SlotCodec, CapacityOverflowIsAnErrorNotAWrite) {
  auto big = Bytes(200, 0);
  RequestBatch batch;
  batch.batch_id = 3;
  batch.inputs.push_back(Input(TensorSpec{DType::kUInt8, {100}}, {&big}));  // 100 + pad to 128
  batch.inputs.back().parts[0].nbytes = 100;
  batch.inputs.push_back(Input(TensorSpec{DType::kUInt8, {2, 100}}, {&big}));
  ExpectRefused(batch, 256, StatusCode::kResourceExhausted, "raise slot_bytes");
  ExpectRefused(batch, 256, StatusCode::kResourceExhausted, "input 1 of 200 bytes at byte 128");
  Slot fits(384);
  EXPECT_TRUE(WriteRequest(batch, fits.get(), fits.capacity(), nullptr).ok());
}

TEST(SlotCodec, MoreInputsThanASlotHoldsAreRefused) {
  auto one = Bytes(1, 0);
  RequestBatch batch;
  for (int i = 0; i <= kMaxTensors; ++i) {
    batch.inputs.push_back(Input(TensorSpec{DType::kUInt8, {1}}, {&one}));
  }
  ExpectRefused(batch, kCapacity, StatusCode::kInternal,
                "batch has 17 inputs; a request slot holds at most 16");
}

TEST(SlotCodec, InconsistentBatchesAreRefused) {
  auto part = Bytes(8, 0);
  RequestBatch short_parts;
  short_parts.inputs.push_back(Input(TensorSpec{DType::kFloat32, {3}}, {&part}));
  ExpectRefused(short_parts, kCapacity, StatusCode::kInternal,
                "input 0 (float32 [3]) needs 12 bytes but its 1 parts hold 8");
  RequestBatch long_parts;
  long_parts.inputs.push_back(Input(TensorSpec{DType::kFloat32, {1}}, {&part, &part}));
  ExpectRefused(long_parts, kCapacity, StatusCode::kInternal, "parts hold more");
  RequestBatch deep;
  deep.inputs.push_back(Input(TensorSpec{DType::kUInt8, std::vector<int64_t>(9, 1)}, {&part}));
  ExpectRefused(deep, kCapacity, StatusCode::kInternal, "ranks up to 8");
  RequestBatch bad_region;
  RequestInput in_region;
  in_region.spec = TensorSpec{DType::kUInt8, {8}};
  in_region.region = 0;
  bad_region.inputs.push_back(in_region);
  ExpectRefused(bad_region, kCapacity, StatusCode::kInternal,
                "outside the regions the batch names");
  AddClientRegion("/small", 4, &bad_region);
  ExpectRefused(bad_region, kCapacity, StatusCode::kInternal, "bytes [0, +8) of client region 0");
  RequestBatch bad_output;
  AddClientRegion("/out", 64, &bad_output);
  bad_output.output_region = 0;
  bad_output.output_offset = 32;
  bad_output.output_bytes = 64;
  ExpectRefused(bad_output, kCapacity, StatusCode::kInternal,
                "output range [32, +64) lies outside the 64-byte client region");
  bad_output.output_region = 1;
  ExpectRefused(bad_output, kCapacity, StatusCode::kInternal, "output region 1 of 1");
}

TEST(SlotCodec, AShrunkClientRegionBecomesZeros) {
  InstallBusGuard();
  const std::string name = "/torchfarm-" + std::to_string(::getpid()) + "-codec-test";
  std::unique_ptr<SharedRegion> region;
  ASSERT_TRUE(SharedRegion::Create(name, 1 << 16, 0600, -1, &region).ok());
  std::memset(region->data(), 7, 1 << 16);
  auto framed = Bytes(8192, 1);
  RequestBatch batch;
  batch.inputs.push_back(Input(TensorSpec{DType::kUInt8, {2, 8192}}, {&framed}));
  batch.inputs[0].parts.push_back(TensorPart{region->data() + 8192, 8192, true});
  ASSERT_EQ(::truncate(("/dev/shm" + name).c_str(), 4096), 0);
  Slot slot(1 << 15);
  RequestWriteReport report;
  ASSERT_TRUE(WriteRequest(batch, slot.get(), slot.capacity(), &report).ok());
  ASSERT_EQ(report.zero_filled.size(), 1u);
  EXPECT_EQ(report.zero_filled[0], (std::pair<size_t, size_t>{0, 1}));
  EXPECT_EQ(slot.data()[8191], framed[8191]);
  EXPECT_EQ(slot.data()[8192], 0);
  EXPECT_EQ(slot.data()[16383], 0);
}

// ---- Malformed request slots: each rejection names what it read and what it expected ----

struct Malformed {
  const char* what;
  void (*corrupt)(SlotHeader*);
  const char* message;
};

TEST(SlotCodec, ReadRequestRejectsEveryMalformedField) {
  const Malformed cases[] = {
      {"tensor_count", [](SlotHeader* h) { h->tensor_count = 17; },
       "request has 17 tensors; a slot holds at most 16"},
      {"region_count", [](SlotHeader* h) { h->region_count = 5; },
       "request slot names 5 client regions; expected at most 4"},
      {"unterminated name",
       [](SlotHeader* h) {
         h->region_count = 1;
         std::memset(h->regions[0].name, 'x', kRegionNameBytes);
       },
       "client region 0's name is not NUL-terminated; expected 1 to 55 characters and a NUL"},
      {"empty name", [](SlotHeader* h) { h->region_count = 1; }, "client region 0's name is empty"},
      {"output region",
       [](SlotHeader* h) {
         NameOneRegion(h, 100);
         h->output_region = 2;
       },
       "request slot names output region 2 of 1"},
      {"output range",
       [](SlotHeader* h) {
         NameOneRegion(h, 100);
         h->output_region = 1;
         h->output_offset = 64;
         h->output_bytes = 64;
       },
       "output range [64, +64) lies outside the 100-byte client region"},
      {"dtype", [](SlotHeader* h) { h->tensors[0].dtype = 99; },
       "request tensor 0: invalid dtype code 99 or rank 2; expected a torchfarm dtype and rank <= "
       "8"},
      {"rank", [](SlotHeader* h) { h->tensors[0].rank = 9; },
       "request tensor 0: invalid dtype code 1 or rank 9"},
      {"nbytes", [](SlotHeader* h) { h->tensors[0].nbytes = 12; },
       "request tensor 0: float32 [2, 2] needs 16 bytes but its descriptor says 12"},
      {"negative dim", [](SlotHeader* h) { h->tensors[0].shape[0] = -2; },
       "needs an invalid number of bytes"},
      {"alignment", [](SlotHeader* h) { h->tensors[0].offset = 8; },
       "request tensor 0: offset 8 is not a multiple of 64"},
      {"past the data area", [](SlotHeader* h) { h->tensors[0].offset = kCapacity; },
       "request tensor 0: bytes [4096, +16) lie outside the 4096-byte data area"},
      {"overflowing offset", [](SlotHeader* h) { h->tensors[0].offset = ~uint64_t{63}; },
       "lie outside the 4096-byte data area"},
      {"location", [](SlotHeader* h) { h->tensors[0].location = 1; },
       "request tensor 0: names client region 1 of 0"},
      {"range in region",
       [](SlotHeader* h) {
         NameOneRegion(h, 20);
         h->tensors[0].location = 1;
         h->tensors[0].offset = 8;
       },
       "request tensor 0: bytes [8, +16) lie outside the 20-byte client region"},
      {"refusal",
       [](SlotHeader* h) {
         h->status = static_cast<int32_t>(StatusCode::kResourceExhausted);
         std::strcpy(h->message, "too big");
       },
       "too big"},
  };
  for (const Malformed& c : cases) {
    SCOPED_TRACE(c.what);
    Slot slot;
    WriteOneInputByHand(&slot);
    ASSERT_TRUE(Read(slot).ok());
    c.corrupt(slot.header());
    Status s = Read(slot);
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST(SlotCodec, ARefusalKeepsItsCodeAndAnUnknownCodeIsInternal) {
  Slot slot;
  WriteRefusal(4, ResourceExhausted("no room"), slot.get());
  RequestView view;
  Status s = Read(slot, &view);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "no room");
  EXPECT_EQ(view.batch_id, 4u);
  slot.header()->status = 1234;
  EXPECT_EQ(Read(slot).code(), StatusCode::kInternal);
}

// ---- Responses ----

// A worker's response to `request` with `outputs` (each filled with its index + 1).
Status Answer(const RequestView& request, const std::vector<TensorSpec>& outputs, Slot* response,
              uint8_t* region_data = nullptr) {
  Slot request_slot;
  request_slot.header()->batch_id = request.batch_id;
  BeginResponse(request_slot.get(), response->get());
  OutputPlacement placement;
  Status s = PlaceResponseOutputs(outputs, request, response->capacity(), &placement);
  if (!s.ok()) return s;
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::memset(OutputBytes(placement, i, response->get(), region_data), static_cast<int>(i + 1),
                *ByteSize(outputs[i]));
  }
  WriteResponseOutputs(outputs, placement, response->get());
  FinishResponse(Status::Ok(), 1234, response->get());
  return Status::Ok();
}

ResponseExpectation Expect(uint64_t batch_id, uint64_t capacity = kCapacity) {
  return ResponseExpectation{batch_id, capacity};
}

TEST(SlotCodec, ResponseRoundTripsAndSplitsIntoRequests) {
  RequestView request;
  request.batch_id = 21;
  Slot response;
  const std::vector<TensorSpec> outputs = {{DType::kFloat32, {4, 2}}, {DType::kInt8, {4}}};
  ASSERT_TRUE(Answer(request, outputs, &response).ok());
  ResponseExpectation expected = Expect(21);
  expected.batch_rows = 4;
  ResponseView view;
  Status s = ReadResponse(response.get(), expected, &view);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(view.compute_us, 1234u);
  EXPECT_EQ(view.outputs, outputs);
  EXPECT_EQ(view.offsets, (std::vector<uint64_t>{0, 64}));
  auto [bytes, length] = view.OutputRows(0, 1, 2);  // rows 1 and 2 of output 0
  EXPECT_EQ(bytes, response.data() + 8);
  EXPECT_EQ(length, 16u);
  auto [int8_bytes, int8_length] = view.OutputRows(1, 3, 1);
  EXPECT_EQ(int8_bytes, response.data() + 64 + 3);
  EXPECT_EQ(int8_length, 1u);
  EXPECT_EQ(*int8_bytes, 2);
}

TEST(SlotCodec, InPlaceResponseIsCheckedAgainstPlaceOutputs) {
  std::vector<uint8_t> region(4096);
  RequestView request;
  request.batch_id = 8;
  ClientRegionRef ref{};
  std::strcpy(ref.name, "/out");
  ref.bytes = region.size();
  request.regions.push_back(ref);
  request.output_region = 1;
  request.output_offset = 128;
  request.output_bytes = 1024;
  const std::vector<TensorSpec> outputs = {{DType::kUInt8, {3}}, {DType::kFloat32, {2}}};
  Slot response;
  ASSERT_TRUE(Answer(request, outputs, &response, region.data()).ok());
  EXPECT_EQ(region[128], 1);
  EXPECT_EQ(region[192], 2) << "the second output at the next multiple of 64";
  ResponseExpectation expected = Expect(8);
  expected.outputs_in_place = true;
  expected.output_offset = 128;
  expected.output_bytes = 1024;
  ResponseView view;
  ASSERT_TRUE(ReadResponse(response.get(), expected, &view).ok());
  EXPECT_EQ(view.offsets, (std::vector<uint64_t>{128, 192}));
  EXPECT_EQ(view.OutputRows(0, 0, 3).first, nullptr) << "in place: nothing in the slot";

  response.header()->tensors[1].offset = 200;
  Status s = ReadResponse(response.get(), expected, &view);
  EXPECT_THAT(s.message(), HasSubstr("worker placed output 1 at byte 200 of the region, 192 was "
                                     "expected"));
  expected.output_bytes = 70;  // 3 bytes, then 8 at byte 64
  s = ReadResponse(response.get(), expected, &view);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << "PlaceOutputs' own error";

  request.output_bytes = 10;
  EXPECT_EQ(Answer(request, outputs, &response, region.data()).code(),
            StatusCode::kResourceExhausted);
}

TEST(SlotCodec, OutputsASlotCannotHoldAreRefused) {
  RequestView request;
  Slot response(256);
  OutputPlacement placement;
  Status s = PlaceResponseOutputs({{DType::kUInt8, {100}}, {DType::kUInt8, {129}}}, request,
                                  response.capacity(), &placement);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("outputs need 257 bytes, a response slot holds 256 bytes; "
                                     "raise slot_bytes"));
  std::vector<TensorSpec> many(kMaxTensors + 1, TensorSpec{DType::kUInt8, {1}});
  s = PlaceResponseOutputs(many, request, response.capacity(), &placement);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("17 outputs; a response slot holds at most 16"));
}

TEST(SlotCodec, AFailedResponseCarriesItsMessageAndNoOutputs) {
  RequestView request;
  request.batch_id = 2;
  Slot response;
  ASSERT_TRUE(Answer(request, {{DType::kUInt8, {4}}}, &response).ok());
  FinishResponse(Internal(std::string(1000, 'm')), 9, response.get());
  EXPECT_EQ(response.header()->tensor_count, 0u);
  ResponseView view;
  Status s = ReadResponse(response.get(), Expect(2), &view);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), std::string(kSlotMessageBytes - 1, 'm'));
  EXPECT_EQ(view.compute_us, 9u) << "compute time counts for failed batches too";
  response.header()->status = 77;
  EXPECT_EQ(ReadResponse(response.get(), Expect(2), &view).code(), StatusCode::kInternal);
  response.header()->status = static_cast<int32_t>(StatusCode::kNotFound);
  EXPECT_EQ(ReadResponse(response.get(), Expect(2), &view).code(), StatusCode::kNotFound);
}

struct MalformedResponse {
  const char* what;
  void (*corrupt)(SlotHeader*);
  bool in_place;
  const char* message;
};

TEST(SlotCodec, ReadResponseRejectsEveryMalformedField) {
  const MalformedResponse cases[] = {
      {"batch id", [](SlotHeader* h) { h->batch_id = 6; }, false,
       "worker answered batch 6 while batch 5 was expected"},
      {"tensor_count", [](SlotHeader* h) { h->tensor_count = 17; }, false,
       "worker wrote 17 outputs; a response slot holds at most 16"},
      {"dtype", [](SlotHeader* h) { h->tensors[0].dtype = 0; }, false,
       "worker wrote a malformed output descriptor 0: dtype code 0, rank 2, location 0, bytes "
       "[0, +32); expected a valid dtype and shape whose size is nbytes, in the 4096-byte response "
       "slot"},
      {"rank", [](SlotHeader* h) { h->tensors[0].rank = 9; }, false, "rank 9"},
      {"nbytes", [](SlotHeader* h) { h->tensors[0].nbytes = 31; }, false, "bytes [0, +31)"},
      {"outside the slot", [](SlotHeader* h) { h->tensors[0].offset = 4090; }, false,
       "bytes [4090, +32); expected"},
      {"in a region when not in place", [](SlotHeader* h) { h->tensors[0].location = 1; }, false,
       "location 1"},
      {"in the slot when in place", [](SlotHeader* h) { h->tensors[0].location = 0; }, true,
       "in the client's region"},
      {"lost dim 0",
       [](SlotHeader* h) {
         h->tensors[0].shape[0] = 2;
         h->tensors[0].nbytes = 16;
       },
       false,
       "output 0 has shape [2, 2] but the batch had 4 rows; a batched model must keep dim 0"},
  };
  for (const MalformedResponse& c : cases) {
    SCOPED_TRACE(c.what);
    RequestView request;
    request.batch_id = 5;
    std::vector<uint8_t> region(4096);
    ClientRegionRef ref{};
    std::strcpy(ref.name, "/out");
    ref.bytes = region.size();
    if (c.in_place) {
      request.regions.push_back(ref);
      request.output_region = 1;
      request.output_bytes = region.size();
    }
    Slot response;
    ASSERT_TRUE(Answer(request, {{DType::kFloat32, {4, 2}}}, &response, region.data()).ok());
    ResponseExpectation expected = Expect(5);
    expected.batch_rows = c.in_place ? 0 : 4;
    expected.outputs_in_place = c.in_place;
    expected.output_bytes = c.in_place ? region.size() : 0;
    ResponseView view;
    ASSERT_TRUE(ReadResponse(response.get(), expected, &view).ok());
    c.corrupt(response.header());
    Status s = ReadResponse(response.get(), expected, &view);
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace torchfarm::ipc
