// The one owner of the bytes of a ring slot (ipc/shm_layout.h): what a request slot and a response
// slot hold, who writes them, and the checks on reading them back. Callers hand over and get back
// specs, byte runs and indices; no caller computes an offset into a slot.
//
//   request slot   written by the supervisor (WriteRequest), read by the worker (ReadRequest)
//     batch_id       the supervisor's
//     tensor_count   model inputs, <= kMaxTensors; tensors[i] is input i of the whole batch: the
//                    requests of a batch are concatenated along dim 0
//     tensors[i]     location kInSlot: `offset` from the data area, a multiple of kTensorAlignment,
//                    [offset, offset + nbytes) inside the data area, inputs in order;
//                    location v > 0 (in place): client region v - 1, [offset, +nbytes) inside it
//     regions        region_count (<= kMaxClientRegions) client regions by NUL-terminated name
//     output_region  0: outputs into the response slot; v > 0: into [output_offset, +output_bytes)
//                    of client region v - 1, laid out by PlaceOutputs (common/shm_reference.h)
//     status/message 0; non-zero: a refusal (WriteRefusal): the worker answers with this status
//                    and message without running the batch (tensor_count is 0)
//   response slot  written by the worker (BeginResponse ... FinishResponse), read by the
//                  supervisor (ReadResponse)
//     batch_id       echoed from the request
//     tensor_count   outputs, <= kMaxTensors; 0 when status != 0
//     tensors[i]     kInSlot, 64-byte aligned, packed in order inside the data area; or, when the
//                    request named an output range, location = the request's output_region and
//                    offset = where PlaceOutputs put it in the client region
//     status         torchfarm::StatusCode; message: NUL-terminated text when status != 0
//     compute_us     wall time of forward() plus the output copy
//
// Readers trust nothing in a slot: every count, code, offset and name is checked before use, and a
// violation comes back as an INTERNAL Status that names what was read and what was expected. No
// LibTorch here: the worker wraps the bytes as tensors itself (worker/compute_loop_tensors.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/protocol.h"
#include "common/status.h"
#include "common/tensor_spec.h"
#include "ipc/shm_layout.h"

namespace torchfarm::ipc {

// ---- Bounds, tied to each other and to the protocol ----------------------------------------

static_assert(kMaxTensors >= 1 && static_cast<size_t>(kMaxTensors) >= torchfarm::kMaxInputs,
              "a request slot must hold every input the protocol accepts");
static_assert(static_cast<size_t>(kMaxTensors) >= torchfarm::kMaxOutputs,
              "a response slot must hold every output the protocol returns");
static_assert(kMaxRank <= std::numeric_limits<uint8_t>::max() &&
                  sizeof(TensorDesc::shape) == kMaxRank * sizeof(int64_t),
              "TensorDesc holds the whole shape inline and its rank in a byte");
static_assert(kMaxClientRegions >= 1 && kMaxClientRegions < std::numeric_limits<uint8_t>::max(),
              "TensorDesc::location holds 1 + a region index in a byte");
static_assert(sizeof(SlotHeader::regions) == kMaxClientRegions * sizeof(ClientRegionRef));
static_assert(sizeof(SlotHeader::tensors) == kMaxTensors * sizeof(TensorDesc));
static_assert(kRegionNameBytes >= 2, "a region name is at least '/' and its NUL");
static_assert(kSlotMessageBytes >= 2, "a message is at least one character and its NUL");
static_assert((kTensorAlignment & (kTensorAlignment - 1)) == 0 && kTensorAlignment >= 8,
              "tensor offsets are a power of two that every dtype's element size divides");
static_assert(sizeof(SlotHeader) % kTensorAlignment == 0 && kCacheLine % kTensorAlignment == 0,
              "the data area of a cache-line aligned slot starts tensor-aligned");
static_assert(sizeof(SlotHeader) % kCacheLine == 0);
static_assert(offsetof(SlotHeader, tensors) % alignof(TensorDesc) == 0);

// ---- Descriptors ---------------------------------------------------------------------------

// Fills `desc` for `spec` at `offset` in the slot's data area (location kInSlot); the caller
// checked rank <= kMaxRank.
void FillTensorDesc(const TensorSpec& spec, uint64_t offset, uint64_t nbytes, TensorDesc* desc);
// Reads a descriptor's dtype and shape back; false if its dtype code or rank is invalid.
bool ReadTensorDesc(const TensorDesc& desc, TensorSpec* spec);

// ---- Request slots: the supervisor writes --------------------------------------------------

// A run of bytes copied into a request slot as part of an input tensor.
struct TensorPart {
  const uint8_t* bytes = nullptr;
  uint64_t nbytes = 0;
  // In a client region its client may truncate: copied under the SIGBUS guard
  // (ipc/guarded_copy.h), zeros in the slot when the copy faults.
  bool guarded = false;
};

// One model input of a batch.
struct RequestInput {
  TensorSpec spec;  // of the whole batch: dim 0 counts the rows of every part
  // Copied into the slot one after another: the requests of the batch concatenated along dim 0.
  std::vector<TensorPart> parts;
  // In place (docs/protocol.md, "Shared-memory tensors"): >= 0, the input stays in client region
  // RequestBatch::regions[region] at `region_offset` and `parts` are not used.
  int region = -1;
  uint64_t region_offset = 0;
};

// A client region a request slot names, by its POSIX name and its size as the supervisor mapped it.
struct ClientRegion {
  std::string name;
  uint64_t bytes = 0;
};

struct RequestBatch {
  uint64_t batch_id = 0;
  std::vector<RequestInput> inputs;
  // In place only: the regions the inputs and the output range name, and that range.
  std::vector<ClientRegion> regions;
  int output_region = -1;  // index into regions; -1: outputs go into the response slot
  uint64_t output_offset = 0;
  uint64_t output_bytes = 0;
};

// The index of region `name` in batch->regions, added if new; -1 when the slot's table is full or
// the name does not fit it.
int AddClientRegion(const std::string& name, uint64_t bytes, RequestBatch* batch);

// Data-area bytes a request slot needs for tensors of these sizes, each at the next multiple of
// kTensorAlignment.
uint64_t RequestDataBytes(const std::vector<uint64_t>& tensor_nbytes);

// What WriteRequest did besides writing: the (input, part) of every guarded part whose source
// stopped being backed by memory midway. Its bytes in the slot are zeros.
struct RequestWriteReport {
  std::vector<std::pair<size_t, size_t>> zero_filled;
};

// Writes `batch` into request slot `slot`, whose data area holds `data_capacity` bytes. Checks all
// of it first: input count, dtypes and ranks, that each input's parts add up to its spec, the
// region table and every index into it, and the total against the capacity. On a violation it
// writes no tensor byte, turns the slot into a refusal (WriteRefusal) of the batch with that
// error, and returns the error; the slot is publishable either way.
Status WriteRequest(const RequestBatch& batch, uint8_t* slot, uint64_t data_capacity,
                    RequestWriteReport* report);

// Makes `slot` a request the worker answers with `refusal` (not OK) without running anything.
void WriteRefusal(uint64_t batch_id, const Status& refusal, uint8_t* slot);

// ---- Request slots: the worker reads -------------------------------------------------------

struct RequestTensor {
  TensorSpec spec;
  uint8_t location = kInSlot;  // kInSlot, or 1 + an index into RequestView::regions
  uint64_t offset = 0;         // from the data area, or from the client region's start
  uint64_t nbytes = 0;
  bool in_slot() const { return location == kInSlot; }
  size_t region_index() const { return static_cast<size_t>(location) - 1; }
};

struct RequestView {
  uint64_t batch_id = 0;
  std::vector<RequestTensor> inputs;
  std::vector<ClientRegionRef> regions;  // copies; every name NUL-terminated
  uint32_t output_region = 0;  // 0: outputs into the response slot; else 1 + an index into regions
  uint64_t output_offset = 0;
  uint64_t output_bytes = 0;
  const uint8_t* data = nullptr;  // the slot's data area

  // The first byte of input i: in the slot's data area, or in `region_data`, the mapping of the
  // client region it names (ReadRequest checked its range against the region's size).
  const uint8_t* InputBytes(size_t i, const uint8_t* region_data) const;
};

// Reads request slot `slot` (data area of `data_capacity` bytes). Checks: tensor_count <=
// kMaxTensors; region_count <= kMaxClientRegions, names NUL-terminated; each input's dtype code,
// rank, and nbytes against its shape; in the slot: offset aligned and [offset, +nbytes) inside the
// data area; in a region: an index < region_count and the range inside the region's size; the
// output range likewise. A refusal (status != 0) comes back as its own status and message.
Status ReadRequest(const uint8_t* slot, uint64_t data_capacity, RequestView* out);

// ---- Response slots: the worker writes -----------------------------------------------------

// Starts the response to `request` in `response`: the batch id echoed, no outputs, status OK.
// Returns the batch id.
uint64_t BeginResponse(const uint8_t* request, uint8_t* response);

// Where a response's outputs go.
struct OutputPlacement {
  uint8_t location = kInSlot;     // kInSlot, or the request's output_region (in place)
  std::vector<uint64_t> offsets;  // from the response's data area, or the client region's start
  bool in_slot() const { return location == kInSlot; }
  size_t region_index() const { return static_cast<size_t>(location) - 1; }
};

// Places `outputs` for `request`: packed at kTensorAlignment in the response slot's data area
// (`data_capacity` bytes; RESOURCE_EXHAUSTED "raise slot_bytes" when they do not fit), or, when the
// request named an output range, where PlaceOutputs puts them in it (its error when they do not
// fit). INTERNAL when there are more than kMaxTensors or a spec has no valid size.
Status PlaceResponseOutputs(const std::vector<TensorSpec>& outputs, const RequestView& request,
                            uint64_t data_capacity, OutputPlacement* out);

// The first byte of output i: in `response`'s data area, or in `region_data`, the mapping of the
// client region the placement names.
uint8_t* OutputBytes(const OutputPlacement& placement, size_t i, uint8_t* response,
                     uint8_t* region_data);

// Records `outputs` at `placement` (PlaceResponseOutputs of the same outputs) in `response`.
void WriteResponseOutputs(const std::vector<TensorSpec>& outputs, const OutputPlacement& placement,
                          uint8_t* response);

// A batch's pipeline stages (worker/pipeline_stages.h), as an OK response carries them.
struct RowFailure {
  int64_t row = 0;  // of the batch
  Status status;    // not OK
};
struct PipelineOutcome {
  int64_t decode_us = -1;  // -1: no such stage
  int64_t preprocess_us = -1;
  int64_t postprocess_us = -1;
  // Rows whose item failed (at most kMaxRowErrors; the worker fails a batch with more).
  std::vector<RowFailure> row_failures;
};

// Ends `response`: its status (a failure drops the outputs and carries the message, truncated to
// kSlotMessageBytes - 1) and compute time; when OK and `pipeline` is given, the PipelineReport
// (ipc/shm_layout.h) in its message bytes: row failures beyond kMaxRowErrors are dropped, texts
// truncated to kRowErrorTextBytes - 1.
void FinishResponse(const Status& status, uint64_t compute_us, uint8_t* response,
                    const PipelineOutcome* pipeline = nullptr);

// ---- Response slots: the supervisor reads --------------------------------------------------

struct ResponseExpectation {
  uint64_t batch_id = 0;
  uint64_t data_capacity = 0;  // of the segment the response lies in
  // > 0: the batch held several requests, whose rows the outputs keep along dim 0.
  int64_t batch_rows = 0;
  // Rows of the batch (also of a batch of one request): a pipeline report's failed rows lie
  // below it. 0: unknown, not checked.
  int64_t total_rows = 0;
  // The request named an output range the worker wrote the outputs into (in place).
  bool outputs_in_place = false;
  uint64_t output_offset = 0;
  uint64_t output_bytes = 0;
};

struct ResponseView {
  uint64_t compute_us = 0;  // set even when ReadResponse fails
  std::vector<TensorSpec> outputs;
  std::vector<uint64_t> offsets;  // from the data area, or the client region's start (in place)
  std::vector<uint64_t> nbytes;
  const uint8_t* data = nullptr;  // the data area; null when the outputs are in place
  int64_t batch_rows = 0;         // ResponseExpectation::batch_rows
  // Read from an OK response's PipelineReport; has_pipeline false (and defaults) without one.
  bool has_pipeline = false;
  PipelineOutcome pipeline;
  // Set when ReadResponse failed because the worker broke the slot's layout (a batch id, count,
  // descriptor, pipeline report or in-place placement no correct worker writes), not because the
  // worker reported an error or the model's outputs do not fit the batch: the worker is at fault
  // (ipc/protocol_violation.h).
  bool violation = false;

  // The bytes of rows [first_row, first_row + rows) of output i: one request's share of a batch
  // (of the whole output when batch_rows is 0). Null bytes when the outputs are in place. Reads
  // offsets, nbytes, data and batch_rows only: `outputs` may have been moved away.
  std::pair<const uint8_t*, uint64_t> OutputRows(size_t i, int64_t first_row, int64_t rows) const;
  // Back to a default view, keeping the vectors' memory: a reader that reuses one view does not
  // allocate the offsets and sizes again (each output's shape still is).
  void Reset();
};

// Reads response slot `slot` against what was asked. Fails when: the batch id differs; the worker
// reported an error (its status and message; an unknown code becomes INTERNAL); tensor_count >
// kMaxTensors; an output descriptor has an invalid dtype or rank, nbytes that disagree with its
// shape, or lies outside the response slot (or, in place, is not in the client's region); a
// batched output lost dim 0; in place, an output is not where PlaceOutputs puts it; a pipeline
// report has more than kMaxRowErrors rows, a row at or past total_rows, an OK status or
// unterminated text. All but the worker's own error and the lost dim 0 set out->violation. Each
// field is read from the slot once (the worker may write it meanwhile).
Status ReadResponse(const uint8_t* slot, const ResponseExpectation& expected, ResponseView* out);

}  // namespace torchfarm::ipc
