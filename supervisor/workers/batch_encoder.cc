#include "supervisor/workers/batch_encoder.h"

#include "common/log.h"
#include "supervisor/workers/worker_slot.h"

namespace torchfarm {
namespace {

// True when the request's output range shares bytes with one of its inputs in the same region.
// The worker must not write such outputs in place: an output may be a view of the input it
// overwrites, and a rerun after a crash must find its inputs intact.
bool OutputOverlapsInputs(const PendingRequest& r) {
  const uint64_t begin = r.output_shm.offset, end = begin + r.output_shm.bytes;
  for (size_t i = 0; i < r.input_regions.size(); ++i) {
    if (r.input_regions[i] != r.output_region) continue;
    const uint64_t input_begin = r.input_shm[i].offset;
    const uint64_t input_end = input_begin + r.frames[i].size();
    if (input_begin < end && begin < input_end) return true;
  }
  return false;
}

// Every input as parts, one per request: the copy path. Written over *encoded, whose vectors keep
// their memory.
void CopiedBatch(const InflightBatch& batch, ipc::RequestBatch* encoded) {
  const PendingRequest& first = *batch.requests.front();
  encoded->batch_id = batch.batch_id;
  encoded->regions.clear();
  encoded->output_region = -1;
  encoded->output_offset = 0;
  encoded->output_bytes = 0;
  encoded->inputs.resize(first.inputs.size());
  for (size_t i = 0; i < first.inputs.size(); ++i) {
    ipc::RequestInput& input = encoded->inputs[i];
    input.spec = first.inputs[i];
    if (batch.requests.size() > 1 && !input.spec.shape.empty()) input.spec.shape[0] = batch.rows;
    input.region = -1;
    input.region_offset = 0;
    input.parts.clear();
    input.parts.reserve(batch.requests.size());
    for (const HeldRequest& held : batch.requests) {
      const PendingRequest& r = *held;
      // Bytes in a client region can vanish under the copy if its client truncates it.
      const bool from_region = i < r.input_regions.size() && r.input_regions[i];
      input.parts.push_back(
          ipc::TensorPart{r.frames[i].data<uint8_t>(), r.frames[i].size(), from_region});
    }
  }
}

// `copied` with the request's client regions named instead of copied; false when the slot's
// region table cannot hold them. Outputs that would overwrite an input go through the response
// slot (the supervisor copies them in).
bool NameClientRegions(const PendingRequest& r, const ipc::RequestBatch& copied,
                       ipc::RequestBatch* in_place) {
  *in_place = copied;
  for (size_t i = 0; i < r.input_regions.size(); ++i) {
    const auto& region = r.input_regions[i];
    if (!region) continue;
    const int index = ipc::AddClientRegion(region->name(), region->size(), in_place);
    if (index < 0) return false;
    in_place->inputs[i].region = index;
    in_place->inputs[i].region_offset = r.input_shm[i].offset;
    in_place->inputs[i].parts.clear();
  }
  if (r.output_shm.used() && !OutputOverlapsInputs(r)) {
    const int index =
        ipc::AddClientRegion(r.output_region->name(), r.output_region->size(), in_place);
    if (index < 0) return false;
    in_place->output_region = index;
    in_place->output_offset = r.output_shm.offset;
    in_place->output_bytes = r.output_shm.bytes;
  }
  return true;
}

}  // namespace

BatchEncoding EncodeBatch(const InflightBatch& batch, bool shm_in_place, uint8_t* slot,
                          uint64_t data_capacity, ipc::RequestBatch* scratch) {
  ipc::RequestBatch fresh;
  ipc::RequestBatch& encoded = scratch ? *scratch : fresh;
  CopiedBatch(batch, &encoded);
  const PendingRequest& first = *batch.requests.front();
  BatchEncoding result;
  ipc::RequestBatch in_place;
  // System regions (front-end requests) never go in place: their names are the client's, who
  // may re-create an object under the same name, and the worker's mappings are keyed by name.
  if (shm_in_place && batch.requests.size() == 1 && first.origin == RequestOrigin::kZmq &&
      (!first.input_regions.empty() || first.output_shm.used()) &&
      NameClientRegions(first, encoded, &in_place)) {
    encoded = std::move(in_place);
    result.in_place = true;
    result.outputs_in_place = encoded.output_region >= 0;
  }
  ipc::RequestWriteReport report;
  const Status written = ipc::WriteRequest(encoded, slot, data_capacity, &report);
  for (const auto& [input, request] : report.zero_filled) {
    // Its client truncated the region between the check at dispatch and this copy: it gets
    // zeros, nobody else is affected.
    TF_LOG(kWarn) << "a client region shrank while its input was copied; the request runs on "
                     "zeros"
                  << Kv("region", batch.requests[request]->input_regions[input]->name());
  }
  if (!written.ok()) {
    TF_LOG(kError) << "a batch does not fit its request slot; the worker refuses it"
                   << Kv("batch", batch.batch_id) << Kv("error", written.message());
    return BatchEncoding{};
  }
  return result;
}

ipc::ResponseExpectation ExpectedResponse(const InflightBatch& batch, uint64_t data_capacity) {
  ipc::ResponseExpectation expected;
  expected.batch_id = batch.batch_id;
  expected.data_capacity = data_capacity;
  if (batch.requests.size() > 1) expected.batch_rows = batch.rows;
  expected.total_rows = batch.rows;
  if (batch.outputs_in_place) {
    const ShmRef& range = batch.requests.front()->output_shm;
    expected.outputs_in_place = true;
    expected.output_offset = range.offset;
    expected.output_bytes = range.bytes;
  }
  return expected;
}

}  // namespace torchfarm
