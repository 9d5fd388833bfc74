#include "slot_codec_fuzz_input.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "ipc/slot_codec.h"

namespace torchfarm::fuzz {
namespace {

[[noreturn]] void CodecFail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz invariant broken: %s: %s\n", what, detail.c_str());
  std::abort();
}

// A slot buffer of exactly `bytes` bytes, cache-line aligned like a ring's.
struct SlotBuffer {
  explicit SlotBuffer(size_t bytes)
      : size(bytes), data(static_cast<uint8_t*>(::operator new(bytes, std::align_val_t(64)))) {
    std::memset(data, 0, bytes);
  }
  ~SlotBuffer() { ::operator delete(data, std::align_val_t(64)); }
  SlotBuffer(const SlotBuffer&) = delete;
  SlotBuffer& operator=(const SlotBuffer&) = delete;
  uint64_t capacity() const { return size - sizeof(ipc::SlotHeader); }
  size_t size;
  uint8_t* data;
};

// Reads every byte, so ASan sees a range that is not all inside the buffer.
uint64_t Touch(const uint8_t* bytes, uint64_t nbytes) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < nbytes; ++i) sum += bytes[i];
  return sum;
}

// The accepted request written anew, inputs packed from offset 0.
ipc::RequestBatch Reencode(const ipc::RequestView& view) {
  ipc::RequestBatch batch;
  batch.batch_id = view.batch_id;
  for (const ipc::ClientRegionRef& ref : view.regions) {
    batch.regions.push_back(ipc::ClientRegion{ref.name, ref.bytes});
  }
  batch.output_region = static_cast<int>(view.output_region) - 1;
  batch.output_offset = view.output_offset;
  batch.output_bytes = view.output_bytes;
  for (size_t i = 0; i < view.inputs.size(); ++i) {
    const ipc::RequestTensor& tensor = view.inputs[i];
    ipc::RequestInput input;
    input.spec = tensor.spec;
    if (tensor.in_slot()) {
      input.parts.push_back(ipc::TensorPart{view.InputBytes(i, nullptr), tensor.nbytes, false});
    } else {
      input.region = static_cast<int>(tensor.region_index());
      input.region_offset = tensor.offset;
    }
    batch.inputs.push_back(std::move(input));
  }
  return batch;
}

void CheckSameRequest(const ipc::RequestView& a, const ipc::RequestView& b) {
  if (a.batch_id != b.batch_id || a.inputs.size() != b.inputs.size() ||
      a.regions.size() != b.regions.size() || a.output_region != b.output_region ||
      a.output_offset != b.output_offset || a.output_bytes != b.output_bytes) {
    CodecFail("request round trip", "header fields differ");
  }
  for (size_t k = 0; k < a.regions.size(); ++k) {
    if (std::strcmp(a.regions[k].name, b.regions[k].name) != 0 ||
        a.regions[k].bytes != b.regions[k].bytes) {
      CodecFail("request round trip", "region " + std::to_string(k) + " differs");
    }
  }
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const ipc::RequestTensor &x = a.inputs[i], &y = b.inputs[i];
    if (!(x.spec == y.spec) || x.location != y.location || x.nbytes != y.nbytes ||
        (x.in_slot()
             ? std::memcmp(a.InputBytes(i, nullptr), b.InputBytes(i, nullptr), x.nbytes) != 0
             : x.offset != y.offset)) {
      CodecFail("request round trip", "input " + std::to_string(i) + " differs");
    }
  }
}

// The request's inputs, as a worker's outputs, through a response and back.
void AnswerWithInputs(const uint8_t* request, const ipc::RequestView& view, size_t slot_bytes) {
  std::vector<TensorSpec> outputs;
  for (const ipc::RequestTensor& tensor : view.inputs) {
    // A bytes input is decoded by the worker's pipeline; no output is ever bytes.
    if (IsBytes(tensor.spec.dtype)) return;
    outputs.push_back(tensor.spec);
  }
  SlotBuffer response(slot_bytes);
  ipc::BeginResponse(request, response.data);
  ipc::OutputPlacement placement;
  Status placed = ipc::PlaceResponseOutputs(outputs, view, response.capacity(), &placement);
  if (!placed.ok()) {
    if (placed.code() != StatusCode::kResourceExhausted)
      CodecFail("outputs placed", placed.ToString());
    return;
  }
  for (size_t i = 0; placement.in_slot() && i < outputs.size(); ++i) {
    std::memset(ipc::OutputBytes(placement, i, response.data, nullptr), 1, view.inputs[i].nbytes);
  }
  ipc::WriteResponseOutputs(outputs, placement, response.data);
  ipc::FinishResponse(Status::Ok(), 1, response.data);
  ipc::ResponseExpectation expected;
  expected.batch_id = view.batch_id;
  expected.data_capacity = response.capacity();
  expected.outputs_in_place = !placement.in_slot();
  expected.output_offset = view.output_offset;
  expected.output_bytes = view.output_bytes;
  ipc::ResponseView read;
  Status s = ipc::ReadResponse(response.data, expected, &read);
  if (!s.ok() || !(read.outputs == outputs)) CodecFail("response round trip", s.ToString());
}

void FuzzRequest(const SlotBuffer& slot) {
  ipc::RequestView view;
  if (!ipc::ReadRequest(slot.data, slot.capacity(), &view).ok()) return;
  for (size_t i = 0; i < view.inputs.size(); ++i) {
    if (view.inputs[i].in_slot()) Touch(view.InputBytes(i, nullptr), view.inputs[i].nbytes);
  }
  SlotBuffer again(slot.size);
  Status written = ipc::WriteRequest(Reencode(view), again.data, again.capacity(), nullptr);
  if (!written.ok()) {
    // Only packing can fail: the reader accepted overlapping inputs that need more room apart.
    if (written.code() != StatusCode::kResourceExhausted) CodecFail("rewrite", written.ToString());
    return;
  }
  ipc::RequestView reread;
  Status s = ipc::ReadRequest(again.data, again.capacity(), &reread);
  if (!s.ok()) CodecFail("reread", s.ToString());
  CheckSameRequest(view, reread);
  AnswerWithInputs(slot.data, view, slot.size);
}

void FuzzResponse(const SlotBuffer& slot) {
  const ipc::SlotHeader& header = *ipc::SlotHeaderOf(slot.data);
  ipc::ResponseExpectation expected;
  expected.batch_id = header.batch_id;
  expected.data_capacity = slot.capacity();
  expected.batch_rows = header.region_count % 64;
  expected.outputs_in_place = header.output_region != 0;
  expected.output_offset = header.output_offset;
  expected.output_bytes = header.output_bytes;
  ipc::ResponseView view;
  if (!ipc::ReadResponse(slot.data, expected, &view).ok() || expected.outputs_in_place) return;
  for (size_t i = 0; i < view.outputs.size(); ++i) {
    const int64_t rows = expected.batch_rows;
    const auto [bytes, nbytes] = view.OutputRows(i, 0, rows);
    if (nbytes != view.nbytes[i]) CodecFail("output rows", "all rows are not the whole output");
    Touch(bytes, nbytes);
  }
}

}  // namespace

void RunSlotCodecInput(const uint8_t* data, size_t size) {
  SlotBuffer slot(std::max(size, sizeof(ipc::SlotHeader)));
  if (size > 0) std::memcpy(slot.data, data, size);
  FuzzRequest(slot);
  FuzzResponse(slot);
}

}  // namespace torchfarm::fuzz
