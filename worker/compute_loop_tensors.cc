// ComputeLoop, the tensor side: request tensors in (over the request slot, or in place over a
// client's shared-memory region), outputs out (into the response slot, or into the client's
// output range), and the worker's mappings of client regions. The loop itself is in
// compute_loop.cc.
#include <cstring>

#include "common/log.h"
#include "common/shm_reference.h"
#include "common/tensor_spec.h"
#include "worker/compute_loop.h"
#include "worker/torch_compat.h"

namespace torchfarm::worker {
namespace {

// Validates one request descriptor against the slot's data area.
Status CheckDescriptor(const ipc::TensorDesc& desc, uint64_t capacity, uint32_t index,
                       TensorSpec* spec, bool aligned = true) {
  const std::string where = "request tensor " + std::to_string(index) + ": ";
  if (!ipc::ReadTensorDesc(desc, spec)) {
    return Internal(where + "invalid dtype code " + std::to_string(desc.dtype) + " or rank " +
                    std::to_string(desc.rank));
  }
  auto expected = ByteSize(*spec);
  if (!expected || *expected != desc.nbytes) {
    return Internal(where + SpecToString(*spec) + " needs " +
                    (expected ? std::to_string(*expected) : std::string("an invalid number of")) +
                    " bytes but its descriptor says " + std::to_string(desc.nbytes));
  }
  if ((aligned && desc.offset % ipc::kTensorAlignment != 0) || desc.offset > capacity ||
      desc.nbytes > capacity - desc.offset) {
    return Internal(where + "bytes [" + std::to_string(desc.offset) + ", +" +
                    std::to_string(desc.nbytes) + ") are misaligned or outside the " +
                    std::to_string(capacity) + "-byte " +
                    (aligned ? "data area" : "client region"));
  }
  return Status::Ok();
}

}  // namespace

Status ComputeLoop::AcquireClientRegion(const ipc::ClientRegionRef& ref, ipc::SharedRegion** out) {
  Status s = client_regions_.Acquire(ref, out);
  if (s.ok()) launch_regions_.push_back(*out);
  return s;
}

void ComputeLoop::TrimClientRegions() {
  // Regions a batch in flight points into are never unmapped (ClientRegionCache counts uses).
  // Once a second at most: each cached region costs a shm_open.
  const auto now = Clock::now();
  if (client_regions_.size() == 0 || now < next_region_trim_) return;
  next_region_trim_ = now + std::chrono::seconds(1);
  client_regions_.Trim();
}

Status ComputeLoop::BuildInputs(const uint8_t* request, std::vector<c10::IValue>* inputs,
                                int64_t* rows) {
  const ipc::SlotHeader* header = ipc::SlotHeaderOf(request);
  if (header->tensor_count > static_cast<uint32_t>(ipc::kMaxTensors)) {
    return Internal("request has " + std::to_string(header->tensor_count) +
                    " tensors; a slot holds at most " + std::to_string(ipc::kMaxTensors));
  }
  // from_blob needs a non-const pointer; the model may not write to its inputs, and nothing reads
  // the request slot after this batch.
  uint8_t* data = const_cast<uint8_t*>(ipc::SlotData(request));
  for (uint32_t i = 0; i < header->tensor_count; ++i) {
    TensorSpec spec;
    uint8_t* bytes = nullptr;
    Status status = TensorBytes(header, data, i, &spec, &bytes);
    if (!status.ok()) return status;
    if (i == 0) *rows = Rows(spec);
    at::Tensor tensor =
        torch::from_blob(bytes, spec.shape, at::TensorOptions().dtype(ToScalarType(spec.dtype)));
    inputs->emplace_back(PrepareInput(tensor));
  }
  return Status::Ok();
}

Status ComputeLoop::TensorBytes(const ipc::SlotHeader* header, uint8_t* data, uint32_t index,
                                TensorSpec* spec, uint8_t** bytes) {
  const ipc::TensorDesc& desc = header->tensors[index];
  if (desc.location == ipc::kInSlot) {
    Status status = CheckDescriptor(desc, segment_->data_capacity(), index, spec);
    *bytes = data + desc.offset;
    return status;
  }
  // In place: the input lies in a client region the supervisor checked it against.
  ipc::SharedRegion* region = nullptr;
  if (desc.location > header->region_count || header->region_count > ipc::kMaxClientRegions) {
    return Internal("request tensor " + std::to_string(index) + " names client region " +
                    std::to_string(desc.location) + " of " +
                    std::to_string(header->region_count));
  }
  if (Status s = AcquireClientRegion(header->regions[desc.location - 1], &region); !s.ok()) {
    return s;
  }
  Status status = CheckDescriptor(desc, region->size(), index, spec, /*aligned=*/false);
  *bytes = region->data() + desc.offset;
  return status;
}

at::Tensor ComputeLoop::PrepareInput(const at::Tensor& host) {
  at::Tensor tensor = accelerator_->ToDevice(host);
  // Cast on the device, after the copy: a cross-device copy that also converts would stage the
  // conversion in pageable host memory.
  if (precision_ != c10::kFloat && tensor.is_floating_point()) tensor = tensor.to(precision_);
  return tensor;
}

Status ComputeLoop::CollectOutputs(const c10::IValue& output, std::vector<at::Tensor>* tensors) {
  std::vector<c10::IValue> elements;
  if (output.isTensor()) {
    elements.push_back(output);
  } else if (!UnpackSequence(output, &elements)) {
    return Internal("model returned " + IValueKind(output) +
                    "; torchfarm expects a Tensor or a tuple/list of Tensors");
  }
  if (elements.size() > static_cast<size_t>(ipc::kMaxTensors)) {
    return Internal("model returned " + std::to_string(elements.size()) +
                    " outputs; a response holds at most " + std::to_string(ipc::kMaxTensors));
  }
  for (size_t i = 0; i < elements.size(); ++i) {
    const std::string where = "output " + std::to_string(i);
    if (!elements[i].isTensor()) {
      return Internal(where + " is " + IValueKind(elements[i]) + ", not a Tensor");
    }
    const at::Tensor& tensor = elements[i].toTensor();
    if (!tensor.defined()) return Internal(where + " is an undefined Tensor");
    if (!FromScalarType(tensor.scalar_type())) {
      return Internal(where + " has dtype " + ScalarTypeName(tensor.scalar_type()) +
                      ", which torchfarm cannot carry (supported: " + AllDTypeNames() + ")");
    }
    if (tensor.dim() > kMaxRank) {
      return Internal(where + " has " + std::to_string(tensor.dim()) + " dimensions; at most " +
                      std::to_string(kMaxRank));
    }
    // A reduced-precision model answers in float32, the type its clients sent.
    tensors->push_back(precision_ != c10::kFloat && tensor.scalar_type() == precision_
                           ? tensor.to(c10::kFloat)
                           : tensor);
  }
  return Status::Ok();
}

Status ComputeLoop::WriteOutputs(const std::vector<at::Tensor>& tensors, const uint8_t* request,
                                 uint8_t* response) {
  const ipc::SlotHeader* request_header = ipc::SlotHeaderOf(request);
  std::vector<uint64_t> offsets;
  uint8_t* data = ipc::SlotData(response);
  uint8_t location = ipc::kInSlot;
  if (request_header->output_region != 0) {
    // In place: the client's output range, laid out as the supervisor expects (PlaceOutputs).
    Status s = PlaceInClientRegion(tensors, request_header, &data, &offsets);
    if (!s.ok()) return s;
    location = static_cast<uint8_t>(request_header->output_region);
  } else {
    const uint64_t capacity = segment_->data_capacity();
    uint64_t end = 0;
    for (const at::Tensor& tensor : tensors) {
      offsets.push_back(ipc::AlignUp(end, ipc::kTensorAlignment));
      end = offsets.back() + tensor.nbytes();
    }
    if (end > capacity) {
      return ResourceExhausted("outputs need " + std::to_string(end) +
                               " bytes, a response slot holds " + std::to_string(capacity) +
                               " bytes; raise slot_bytes");
    }
  }
  ipc::SlotHeader* header = ipc::SlotHeaderOf(response);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& tensor = tensors[i];
    const uint64_t nbytes = tensor.nbytes();
    if (nbytes > 0) {
      // Straight into the response slot: one copy, asynchronous on a GPU lane.
      at::Tensor destination = torch::from_blob(data + offsets[i], tensor.sizes(),
                                                at::TensorOptions().dtype(tensor.scalar_type()));
      accelerator_->CopyToHost(tensor, destination);
    }
    TensorSpec spec;
    spec.dtype = *FromScalarType(tensor.scalar_type());
    spec.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
    ipc::FillTensorDesc(spec, offsets[i], nbytes, &header->tensors[i]);
    header->tensors[i].location = location;
  }
  header->tensor_count = static_cast<uint32_t>(tensors.size());
  return Status::Ok();
}

Status ComputeLoop::PlaceInClientRegion(const std::vector<at::Tensor>& tensors,
                                        const ipc::SlotHeader* request, uint8_t** base,
                                        std::vector<uint64_t>* offsets) {
  if (request->output_region > request->region_count ||
      request->region_count > ipc::kMaxClientRegions) {
    return Internal("request names output region " + std::to_string(request->output_region) +
                    " of " + std::to_string(request->region_count));
  }
  const ipc::ClientRegionRef& ref = request->regions[request->output_region - 1];
  ipc::SharedRegion* region = nullptr;
  if (Status s = AcquireClientRegion(ref, &region); !s.ok()) return s;
  if (request->output_offset > region->size() ||
      request->output_bytes > region->size() - request->output_offset) {
    return Internal("output range [" + std::to_string(request->output_offset) + ", +" +
                    std::to_string(request->output_bytes) + ") lies outside the " +
                    std::to_string(region->size()) + "-byte client region");
  }
  std::vector<TensorSpec> specs;
  for (const at::Tensor& tensor : tensors) {
    TensorSpec spec;
    spec.dtype = *FromScalarType(tensor.scalar_type());
    spec.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
    specs.push_back(std::move(spec));
  }
  ShmRef range{"", request->output_offset, request->output_bytes};
  if (Status s = PlaceOutputs(specs, range, offsets); !s.ok()) return s;
  *base = region->data();
  return Status::Ok();
}

}  // namespace torchfarm::worker
