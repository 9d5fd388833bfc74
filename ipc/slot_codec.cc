#include "ipc/slot_codec.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "common/shm_reference.h"
#include "ipc/guarded_copy.h"

namespace torchfarm::ipc {
namespace {

std::string Range(uint64_t offset, uint64_t nbytes) {
  return "[" + std::to_string(offset) + ", +" + std::to_string(nbytes) + ")";
}

// [offset, offset + nbytes) inside [0, size), without overflow.
bool Within(uint64_t offset, uint64_t nbytes, uint64_t size) {
  return offset <= size && nbytes <= size - offset;
}

// A status code read from a slot; anything outside the protocol's set becomes INTERNAL.
StatusCode CodeFromSlot(int32_t status) {
  const auto code = static_cast<StatusCode>(status);
  // StatusCodeName names every unknown code INTERNAL, so only a known one parses back to itself.
  const auto known = ParseStatusCode(StatusCodeName(code));
  return status != 0 && known == code ? code : StatusCode::kInternal;
}

std::string MessageFromSlot(const SlotHeader& header) {
  return std::string(header.message, strnlen(header.message, kSlotMessageBytes));
}

void SetMessage(const std::string& message, SlotHeader* header) {
  const size_t n = std::min(message.size(), kSlotMessageBytes - 1);
  std::memcpy(header->message, message.data(), n);
  header->message[n] = '\0';
}

// Clears what a slot carries besides its tensor descriptors and region names.
void ResetHeader(uint64_t batch_id, SlotHeader* header) {
  header->batch_id = batch_id;
  header->tensor_count = 0;
  header->status = 0;
  header->compute_us = 0;
  header->region_count = 0;
  header->output_region = 0;
  header->output_offset = 0;
  header->output_bytes = 0;
  header->message[0] = '\0';
}

// ---- WriteRequest's checks, before any byte is written ----

Status CheckRegionTable(const RequestBatch& batch) {
  if (batch.regions.size() > static_cast<size_t>(kMaxClientRegions)) {
    return Internal("batch names " + std::to_string(batch.regions.size()) +
                    " client regions; a request slot holds at most " +
                    std::to_string(kMaxClientRegions));
  }
  for (size_t k = 0; k < batch.regions.size(); ++k) {
    const std::string& name = batch.regions[k].name;
    if (name.empty() || name.size() >= kRegionNameBytes) {
      return Internal("client region " + std::to_string(k) + " has a " +
                      std::to_string(name.size()) + "-byte name; a request slot holds 1 to " +
                      std::to_string(kRegionNameBytes - 1));
    }
  }
  if (batch.output_region < -1 || batch.output_region >= static_cast<int>(batch.regions.size())) {
    return Internal("output region " + std::to_string(batch.output_region) + " of " +
                    std::to_string(batch.regions.size()) + " client regions");
  }
  if (batch.output_region >= 0 &&
      !Within(batch.output_offset, batch.output_bytes, batch.regions[batch.output_region].bytes)) {
    return Internal(
        "output range " + Range(batch.output_offset, batch.output_bytes) + " lies outside the " +
        std::to_string(batch.regions[batch.output_region].bytes) + "-byte client region");
  }
  return Status::Ok();
}

// An input's bytes: from its spec, or for a bytes input (its size is in its items, which the
// supervisor checked at intake) the sum of its parts; such an input is never in place.
std::optional<uint64_t> InputByteCount(const RequestInput& input) {
  if (!IsBytes(input.spec.dtype)) return ByteSize(input.spec);
  if (input.region >= 0) return std::nullopt;
  uint64_t total = 0;
  for (const TensorPart& part : input.parts) {
    if (part.nbytes > (uint64_t{1} << 62) - total) return std::nullopt;
    total += part.nbytes;
  }
  return total;
}

// Checks input `index` and, for one copied into the slot, advances `*end` (the data area used so
// far, aligned) past it, recording its offset.
Status PlanInput(const RequestBatch& batch, size_t index, uint64_t data_capacity, uint64_t* end,
                 uint64_t* offset) {
  const RequestInput& input = batch.inputs[index];
  // Built only for an error: this runs for every input of every batch.
  auto where = [&] {
    return "input " + std::to_string(index) + " (" + SpecToString(input.spec) + ")";
  };
  const auto nbytes = InputByteCount(input);
  if (input.spec.shape.size() > static_cast<size_t>(kMaxRank) || !nbytes) {
    return Internal(where() + ": a slot holds ranks up to " + std::to_string(kMaxRank) +
                    " and sizes below 2^62 bytes");
  }
  if (input.region >= 0) {
    if (input.region >= static_cast<int>(batch.regions.size()) ||
        !Within(input.region_offset, *nbytes, batch.regions[input.region].bytes)) {
      return Internal(where() + ": bytes " + Range(input.region_offset, *nbytes) +
                      " of client region " + std::to_string(input.region) +
                      " are outside the regions the batch names");
    }
    *offset = input.region_offset;
    return Status::Ok();
  }
  uint64_t parts = 0;
  for (const TensorPart& part : input.parts) {
    if (part.nbytes > *nbytes - parts) {
      parts = *nbytes + 1;  // more than the spec: no need to add further (or overflow)
      break;
    }
    parts += part.nbytes;
  }
  if (parts != *nbytes) {
    return Internal(where() + " needs " + std::to_string(*nbytes) + " bytes but its " +
                    std::to_string(input.parts.size()) + " parts hold " +
                    (parts > *nbytes ? "more" : std::to_string(parts)));
  }
  if (!Within(*end, *nbytes, data_capacity)) {
    return ResourceExhausted("the batch's inputs need more than the " +
                             std::to_string(data_capacity) + " bytes a ring slot holds (input " +
                             std::to_string(index) + " of " + std::to_string(*nbytes) +
                             " bytes at byte " + std::to_string(*end) + "); raise slot_bytes");
  }
  *offset = *end;
  *end = AlignUp(*end + *nbytes, kTensorAlignment);
  return Status::Ok();
}

void CopyParts(const RequestInput& input, size_t index, uint8_t* to, RequestWriteReport* report) {
  for (size_t p = 0; p < input.parts.size(); ++p) {
    const TensorPart& part = input.parts[p];
    if (part.nbytes == 0) continue;  // its bytes may be null
    if (!part.guarded) {
      std::memcpy(to, part.bytes, part.nbytes);
    } else if (!GuardedCopy(to, part.bytes, part.nbytes)) {
      std::memset(to, 0, part.nbytes);
      if (report) report->zero_filled.emplace_back(index, p);
    }
    to += part.nbytes;
  }
}

// ---- ReadRequest's checks ----

Status ReadRegions(const SlotHeader& header, uint32_t region_count, RequestView* out) {
  if (region_count > static_cast<uint32_t>(kMaxClientRegions)) {
    return Internal("request slot names " + std::to_string(region_count) +
                    " client regions; expected at most " + std::to_string(kMaxClientRegions));
  }
  for (uint32_t k = 0; k < region_count; ++k) {
    const ClientRegionRef& ref = header.regions[k];
    const size_t length = strnlen(ref.name, kRegionNameBytes);
    if (length == 0 || length == kRegionNameBytes) {
      return Internal("request slot: client region " + std::to_string(k) + "'s name is " +
                      (length == 0 ? "empty" : "not NUL-terminated") + "; expected 1 to " +
                      std::to_string(kRegionNameBytes - 1) + " characters and a NUL");
    }
    out->regions.push_back(ref);
  }
  const uint32_t output_region = header.output_region;
  if (output_region > region_count) {
    return Internal("request slot names output region " + std::to_string(output_region) + " of " +
                    std::to_string(region_count));
  }
  out->output_region = output_region;
  if (output_region == 0) return Status::Ok();  // the range means nothing then
  out->output_offset = header.output_offset;
  out->output_bytes = header.output_bytes;
  if (!Within(out->output_offset, out->output_bytes, out->regions[output_region - 1].bytes)) {
    return Internal("output range " + Range(out->output_offset, out->output_bytes) +
                    " lies outside the " + std::to_string(out->regions[output_region - 1].bytes) +
                    "-byte client region");
  }
  return Status::Ok();
}

Status ReadRequestTensor(const TensorDesc& desc, uint32_t index, uint64_t data_capacity,
                         const RequestView& view, RequestTensor* out) {
  // Built only for an error: this runs for every input of every batch.
  auto where = [index] { return "request tensor " + std::to_string(index) + ": "; };
  if (!ReadTensorDesc(desc, &out->spec)) {
    return Internal(where() + "invalid dtype code " + std::to_string(desc.dtype) + " or rank " +
                    std::to_string(desc.rank) +
                    "; expected a torchfarm dtype and rank <= " + std::to_string(kMaxRank));
  }
  out->location = desc.location;
  out->offset = desc.offset;
  out->nbytes = desc.nbytes;
  // A bytes input's size is in its items; the worker's pipeline splits them and checks their count
  // against the shape (worker/pipeline_stages.h).
  const auto expected =
      IsBytes(out->spec.dtype) ? std::optional<uint64_t>(out->nbytes) : ByteSize(out->spec);
  if (!expected || *expected != out->nbytes) {
    return Internal(where() + SpecToString(out->spec) + " needs " +
                    (expected ? std::to_string(*expected) : std::string("an invalid number of")) +
                    " bytes but its descriptor says " + std::to_string(out->nbytes));
  }
  if (out->in_slot()) {
    if (out->offset % kTensorAlignment != 0) {
      return Internal(where() + "offset " + std::to_string(out->offset) + " is not a multiple of " +
                      std::to_string(kTensorAlignment));
    }
    if (!Within(out->offset, out->nbytes, data_capacity)) {
      return Internal(where() + "bytes " + Range(out->offset, out->nbytes) + " lie outside the " +
                      std::to_string(data_capacity) + "-byte data area");
    }
    return Status::Ok();
  }
  if (IsBytes(out->spec.dtype)) {
    // WriteRequest never puts one there (InputByteCount): its size is in its items.
    return Internal(where() + "a bytes input lies in client region " +
                    std::to_string(out->location) + "; bytes inputs travel in the slot");
  }
  if (out->region_index() >= view.regions.size()) {
    return Internal(where() + "names client region " + std::to_string(out->location) + " of " +
                    std::to_string(view.regions.size()));
  }
  const uint64_t region_bytes = view.regions[out->region_index()].bytes;
  if (!Within(out->offset, out->nbytes, region_bytes)) {
    return Internal(where() + "bytes " + Range(out->offset, out->nbytes) + " lie outside the " +
                    std::to_string(region_bytes) + "-byte client region");
  }
  return Status::Ok();
}

// ---- Pipeline reports (an OK response's message bytes) ----

void WritePipelineReport(const PipelineOutcome& outcome, SlotHeader* header) {
  PipelineReport report{};
  report.magic = kPipelineReportMagic;
  report.decode_us = outcome.decode_us;
  report.preprocess_us = outcome.preprocess_us;
  report.postprocess_us = outcome.postprocess_us;
  const size_t count = std::min(outcome.row_failures.size(), static_cast<size_t>(kMaxRowErrors));
  report.row_error_count = static_cast<uint32_t>(count);
  for (size_t k = 0; k < count; ++k) {
    const RowFailure& failure = outcome.row_failures[k];
    RowError& error = report.row_errors[k];
    error.row = static_cast<uint32_t>(failure.row);
    error.status =
        static_cast<int32_t>(failure.status.ok() ? StatusCode::kInternal : failure.status.code());
    const std::string& text = failure.status.message();
    const size_t length = std::min(text.size(), kRowErrorTextBytes - 1);
    std::memcpy(error.text, text.data(), length);
    error.text[length] = '\0';
  }
  std::memcpy(header->message, &report, sizeof(report));
}

Status ReadPipelineReport(const SlotHeader& header, int64_t total_rows, ResponseView* out) {
  PipelineReport report;
  std::memcpy(&report, header.message, sizeof(report));
  if (report.magic != kPipelineReportMagic) return Status::Ok();  // no pipeline
  if (report.row_error_count > static_cast<uint32_t>(kMaxRowErrors)) {
    return Internal("worker's pipeline report names " + std::to_string(report.row_error_count) +
                    " failed rows; expected at most " + std::to_string(kMaxRowErrors));
  }
  out->has_pipeline = true;
  out->pipeline.decode_us = report.decode_us;
  out->pipeline.preprocess_us = report.preprocess_us;
  out->pipeline.postprocess_us = report.postprocess_us;
  for (uint32_t k = 0; k < report.row_error_count; ++k) {
    const RowError& error = report.row_errors[k];
    const size_t length = strnlen(error.text, kRowErrorTextBytes);
    const int64_t rows = total_rows > 0 ? total_rows : int64_t{1} << 32;
    if (error.row >= rows || error.status == 0 || length == kRowErrorTextBytes) {
      return Internal("worker's pipeline report: failed row " + std::to_string(error.row) +
                      " with status " + std::to_string(error.status) + "; expected a row below " +
                      std::to_string(rows) + ", a non-OK status and NUL-terminated text");
    }
    out->pipeline.row_failures.push_back(
        RowFailure{error.row, Status(CodeFromSlot(error.status), std::string(error.text, length))});
  }
  return Status::Ok();
}

// ---- ReadResponse's checks ----

// `desc` by value: the worker may rewrite the slot while it is read, so each field is read once.
Status ReadOutput(const TensorDesc desc, uint32_t index, const ResponseExpectation& expected,
                  ResponseView* out) {
  TensorSpec spec;
  const bool where_expected =
      expected.outputs_in_place
          ? desc.location != kInSlot
          : desc.location == kInSlot && Within(desc.offset, desc.nbytes, expected.data_capacity);
  if (!ReadTensorDesc(desc, &spec) || !where_expected || ByteSize(spec) != desc.nbytes) {
    out->violation = true;
    return Internal(
        "worker wrote a malformed output descriptor " + std::to_string(index) + ": dtype code " +
        std::to_string(desc.dtype) + ", rank " + std::to_string(desc.rank) + ", location " +
        std::to_string(desc.location) + ", bytes " + Range(desc.offset, desc.nbytes) +
        "; expected a valid dtype and shape whose size is nbytes, " +
        (expected.outputs_in_place
             ? std::string("in the client's region")
             : "in the " + std::to_string(expected.data_capacity) + "-byte response slot"));
  }
  if (expected.batch_rows > 0 && (spec.shape.empty() || spec.shape[0] != expected.batch_rows)) {
    return Internal("output " + std::to_string(index) + " has shape " + ShapeToString(spec.shape) +
                    " but the batch had " + std::to_string(expected.batch_rows) +
                    " rows; a batched model must keep dim 0 (set max_batch_size 1)");
  }
  out->outputs.push_back(std::move(spec));
  out->offsets.push_back(desc.offset);
  out->nbytes.push_back(desc.nbytes);
  return Status::Ok();
}

Status CheckInPlaceOffsets(const ResponseExpectation& expected, const ResponseView& view) {
  std::vector<uint64_t> offsets;
  const ShmRef range{"", expected.output_offset, expected.output_bytes};
  if (Status s = PlaceOutputs(view.outputs, range, &offsets); !s.ok()) return s;
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (view.offsets[i] != offsets[i]) {
      return Internal("worker placed output " + std::to_string(i) + " at byte " +
                      std::to_string(view.offsets[i]) + " of the region, " +
                      std::to_string(offsets[i]) + " was expected");
    }
  }
  return Status::Ok();
}

}  // namespace

void FillTensorDesc(const TensorSpec& spec, uint64_t offset, uint64_t nbytes, TensorDesc* desc) {
  std::memset(desc, 0, sizeof(*desc));
  desc->dtype = static_cast<uint8_t>(spec.dtype);
  desc->rank = static_cast<uint8_t>(spec.shape.size());
  for (size_t i = 0; i < spec.shape.size() && i < static_cast<size_t>(kMaxRank); ++i) {
    desc->shape[i] = spec.shape[i];
  }
  desc->offset = offset;
  desc->nbytes = nbytes;
}

bool ReadTensorDesc(const TensorDesc& desc, TensorSpec* spec) {
  auto dtype = DTypeFromCode(desc.dtype);
  if (!dtype || desc.rank > kMaxRank) return false;
  spec->dtype = *dtype;
  spec->shape.assign(desc.shape, desc.shape + desc.rank);
  return true;
}

int AddClientRegion(const std::string& name, uint64_t bytes, RequestBatch* batch) {
  for (size_t k = 0; k < batch->regions.size(); ++k) {
    if (batch->regions[k].name == name) return static_cast<int>(k);
  }
  if (batch->regions.size() >= static_cast<size_t>(kMaxClientRegions) || name.empty() ||
      name.size() >= kRegionNameBytes) {
    return -1;
  }
  batch->regions.push_back(ClientRegion{name, bytes});
  return static_cast<int>(batch->regions.size() - 1);
}

uint64_t RequestDataBytes(const std::vector<uint64_t>& tensor_nbytes) {
  uint64_t end = 0;
  for (uint64_t nbytes : tensor_nbytes) end = AlignUp(end + nbytes, kTensorAlignment);
  return end;
}

Status WriteRequest(const RequestBatch& batch, uint8_t* slot, uint64_t data_capacity,
                    RequestWriteReport* report) {
  Status status;
  if (batch.inputs.size() > static_cast<size_t>(kMaxTensors)) {
    status = Internal("batch has " + std::to_string(batch.inputs.size()) +
                      " inputs; a request slot holds at most " + std::to_string(kMaxTensors));
  }
  if (status.ok()) status = CheckRegionTable(batch);
  std::array<uint64_t, kMaxTensors> offsets{};  // inputs beyond kMaxTensors are refused above
  uint64_t end = 0;
  for (size_t i = 0; status.ok() && i < batch.inputs.size(); ++i) {
    status = PlanInput(batch, i, data_capacity, &end, &offsets[i]);
  }
  if (!status.ok()) {
    WriteRefusal(batch.batch_id, status, slot);
    return status;
  }

  SlotHeader* header = SlotHeaderOf(slot);
  ResetHeader(batch.batch_id, header);
  for (size_t k = 0; k < batch.regions.size(); ++k) {
    ClientRegionRef& ref = header->regions[k];
    std::memset(ref.name, 0, sizeof(ref.name));
    std::memcpy(ref.name, batch.regions[k].name.data(), batch.regions[k].name.size());
    ref.bytes = batch.regions[k].bytes;
  }
  header->region_count = static_cast<uint32_t>(batch.regions.size());
  if (batch.output_region >= 0) {
    header->output_region = static_cast<uint32_t>(batch.output_region + 1);
    header->output_offset = batch.output_offset;
    header->output_bytes = batch.output_bytes;
  }
  uint8_t* data = SlotData(slot);
  for (size_t i = 0; i < batch.inputs.size(); ++i) {
    const RequestInput& input = batch.inputs[i];
    FillTensorDesc(input.spec, offsets[i], *InputByteCount(input), &header->tensors[i]);
    if (input.region >= 0) {
      header->tensors[i].location = static_cast<uint8_t>(input.region + 1);
    } else {
      CopyParts(input, i, data + offsets[i], report);
    }
  }
  header->tensor_count = static_cast<uint32_t>(batch.inputs.size());
  return Status::Ok();
}

void WriteRefusal(uint64_t batch_id, const Status& refusal, uint8_t* slot) {
  SlotHeader* header = SlotHeaderOf(slot);
  ResetHeader(batch_id, header);
  header->status = static_cast<int32_t>(refusal.ok() ? StatusCode::kInternal : refusal.code());
  SetMessage(refusal.ok() ? std::string("refused without a reason") : refusal.message(), header);
}

const uint8_t* RequestView::InputBytes(size_t i, const uint8_t* region_data) const {
  const RequestTensor& input = inputs[i];
  return (input.in_slot() ? data : region_data) + input.offset;
}

Status ReadRequest(const uint8_t* slot, uint64_t data_capacity, RequestView* out) {
  const SlotHeader& header = *SlotHeaderOf(slot);
  *out = RequestView{};
  out->batch_id = header.batch_id;
  out->data = SlotData(slot);
  if (header.status != 0) return Status(CodeFromSlot(header.status), MessageFromSlot(header));
  const uint32_t tensor_count = header.tensor_count;
  if (tensor_count > static_cast<uint32_t>(kMaxTensors)) {
    return Internal("request has " + std::to_string(tensor_count) +
                    " tensors; a slot holds at most " + std::to_string(kMaxTensors));
  }
  if (Status s = ReadRegions(header, header.region_count, out); !s.ok()) return s;
  out->inputs.resize(tensor_count);
  for (uint32_t i = 0; i < tensor_count; ++i) {
    Status s = ReadRequestTensor(header.tensors[i], i, data_capacity, *out, &out->inputs[i]);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

uint64_t BeginResponse(const uint8_t* request, uint8_t* response) {
  const uint64_t batch_id = SlotHeaderOf(request)->batch_id;
  ResetHeader(batch_id, SlotHeaderOf(response));
  return batch_id;
}

Status PlaceResponseOutputs(const std::vector<TensorSpec>& outputs, const RequestView& request,
                            uint64_t data_capacity, OutputPlacement* out) {
  *out = OutputPlacement{};
  if (outputs.size() > static_cast<size_t>(kMaxTensors)) {
    return Internal(std::to_string(outputs.size()) + " outputs; a response slot holds at most " +
                    std::to_string(kMaxTensors));
  }
  if (request.output_region != 0) {
    const ShmRef range{"", request.output_offset, request.output_bytes};
    if (Status s = PlaceOutputs(outputs, range, &out->offsets); !s.ok()) return s;
    out->location = static_cast<uint8_t>(request.output_region);
    return Status::Ok();
  }
  uint64_t end = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto nbytes = ByteSize(outputs[i]);
    if (!nbytes || outputs[i].shape.size() > static_cast<size_t>(kMaxRank)) {
      return Internal("output " + std::to_string(i) + " (" + SpecToString(outputs[i]) +
                      ") has no size a slot can hold");
    }
    out->offsets.push_back(AlignUp(end, kTensorAlignment));
    end = out->offsets.back() + *nbytes;  // < 2^62 * kMaxTensors: no overflow
  }
  if (end > data_capacity) {
    return ResourceExhausted("outputs need " + std::to_string(end) +
                             " bytes, a response slot holds " + std::to_string(data_capacity) +
                             " bytes; raise slot_bytes");
  }
  return Status::Ok();
}

uint8_t* OutputBytes(const OutputPlacement& placement, size_t i, uint8_t* response,
                     uint8_t* region_data) {
  return (placement.in_slot() ? SlotData(response) : region_data) + placement.offsets[i];
}

void WriteResponseOutputs(const std::vector<TensorSpec>& outputs, const OutputPlacement& placement,
                          uint8_t* response) {
  SlotHeader* header = SlotHeaderOf(response);
  for (size_t i = 0; i < outputs.size(); ++i) {
    FillTensorDesc(outputs[i], placement.offsets[i], *ByteSize(outputs[i]), &header->tensors[i]);
    header->tensors[i].location = placement.location;
  }
  header->tensor_count = static_cast<uint32_t>(outputs.size());
}

void FinishResponse(const Status& status, uint64_t compute_us, uint8_t* response,
                    const PipelineOutcome* pipeline) {
  SlotHeader* header = SlotHeaderOf(response);
  header->compute_us = compute_us;
  header->status = static_cast<int32_t>(status.code());
  if (status.ok()) {
    header->message[0] = '\0';
    if (pipeline) WritePipelineReport(*pipeline, header);
    return;
  }
  header->tensor_count = 0;
  SetMessage(status.message(), header);
}

std::pair<const uint8_t*, uint64_t> ResponseView::OutputRows(size_t i, int64_t first_row,
                                                             int64_t rows) const {
  uint64_t begin = 0, length = nbytes[i];
  if (batch_rows > 0) {
    const uint64_t row_bytes = nbytes[i] / static_cast<uint64_t>(batch_rows);
    begin = row_bytes * static_cast<uint64_t>(first_row);
    length = row_bytes * static_cast<uint64_t>(rows);
  }
  return {data ? data + offsets[i] + begin : nullptr, length};
}

void ResponseView::Reset() {
  compute_us = 0;
  outputs.clear();
  offsets.clear();
  nbytes.clear();
  data = nullptr;
  batch_rows = 0;
  has_pipeline = false;
  pipeline = PipelineOutcome{};
  violation = false;
}

Status ReadResponse(const uint8_t* slot, const ResponseExpectation& expected, ResponseView* out) {
  const SlotHeader& header = *SlotHeaderOf(slot);
  out->Reset();
  out->compute_us = header.compute_us;
  out->batch_rows = expected.batch_rows;
  out->data = expected.outputs_in_place ? nullptr : SlotData(slot);
  // Each field once: the worker may write the slot while the supervisor reads it.
  const uint64_t batch_id = header.batch_id;
  if (batch_id != expected.batch_id) {
    out->violation = true;
    return Internal("worker answered batch " + std::to_string(batch_id) + " while batch " +
                    std::to_string(expected.batch_id) + " was expected");
  }
  const int32_t status = header.status;
  if (status != 0) return Status(CodeFromSlot(status), MessageFromSlot(header));
  const uint32_t tensor_count = header.tensor_count;
  if (tensor_count > static_cast<uint32_t>(kMaxTensors)) {
    out->violation = true;
    return Internal("worker wrote " + std::to_string(tensor_count) +
                    " outputs; a response slot holds at most " + std::to_string(kMaxTensors));
  }
  for (uint32_t i = 0; i < tensor_count; ++i) {
    if (Status s = ReadOutput(header.tensors[i], i, expected, out); !s.ok()) return s;
  }
  Status s = ReadPipelineReport(header, expected.total_rows, out);
  if (s.ok() && expected.outputs_in_place) s = CheckInPlaceOffsets(expected, *out);
  // Both describe what the worker must write whatever the model does.
  out->violation = !s.ok();
  return s;
}

}  // namespace torchfarm::ipc
