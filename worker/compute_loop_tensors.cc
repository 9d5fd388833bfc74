// ComputeLoop, the tensor side: request tensors in (over the request slot, or in place over a
// client's shared-memory region), outputs out (into the response slot, or into the client's
// output range), and the worker's mappings of client regions. Where the bytes lie, and the checks
// on what the supervisor wrote, come from the slot codec (ipc/slot_codec.h); this file only wraps
// them as tensors. The loop itself is in compute_loop.cc.
#include "common/log.h"
#include "common/protocol.h"
#include "common/tensor_spec.h"
#include "ipc/guarded_copy.h"
#include "worker/compute_loop.h"
#include "worker/torch_compat.h"

namespace torchfarm::worker {

namespace {

// A client region no longer holds [offset, offset + nbytes): its client truncated it.
Status RegionShrank(const ipc::SharedRegion& region, uint64_t offset, uint64_t nbytes) {
  return InvalidArgument("client region '" + region.name() + "' holds " +
                         std::to_string(region.CurrentSize()) + " bytes now, " +
                         std::to_string(region.size()) + " when registered; this request needs " +
                         "bytes [" + std::to_string(offset) + ", " +
                         std::to_string(offset + nbytes) + ") of it (was it truncated?)");
}

// The region's bytes at `bytes` into private memory: size checked (fstat), copy guarded.
Status CopyOutOfRegion(const ipc::SharedRegion& region, const uint8_t* bytes, uint64_t nbytes,
                       void* to) {
  const auto offset = static_cast<uint64_t>(bytes - region.data());
  if (!region.Covers(offset, nbytes) || !ipc::GuardedCopy(to, bytes, nbytes)) {
    return RegionShrank(region, offset, nbytes);
  }
  return Status::Ok();
}

}  // namespace

Status ComputeLoop::FlushRegionWrites(const std::vector<RegionWrite>& writes) {
  for (const RegionWrite& write : writes) {
    const uint64_t nbytes = write.host.nbytes();
    if (!write.region->Covers(write.offset, nbytes) ||
        !ipc::GuardedCopy(write.region->data() + write.offset, write.host.data_ptr(), nbytes)) {
      return RegionShrank(*write.region, write.offset, nbytes);
    }
  }
  return Status::Ok();
}

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

Status ComputeLoop::BuildInputs(const ipc::RequestView& request, std::vector<c10::IValue>* inputs,
                                int64_t* rows) {
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const ipc::RequestTensor& input = request.inputs[i];
    // In place: the input lies in a client region (ReadRequest checked its range).
    ipc::SharedRegion* region = nullptr;
    if (!input.in_slot()) {
      Status s = AcquireClientRegion(request.regions[input.region_index()], &region);
      if (!s.ok()) return s;
    }
    // from_blob needs a non-const pointer; the model may not write to its inputs, and nothing
    // reads the request slot after this batch.
    auto* bytes = const_cast<uint8_t*>(request.InputBytes(i, region ? region->data() : nullptr));
    if (i == 0) *rows = Rows(input.spec);
    const auto options = at::TensorOptions().dtype(ToScalarType(input.spec.dtype));
    at::Tensor tensor;
    if (region) {
      // The client's pages never reach the model (compute_loop.h): a private copy does.
      tensor = at::empty(input.spec.shape, options);
      Status s = CopyOutOfRegion(*region, bytes, input.nbytes, tensor.data_ptr());
      if (!s.ok()) return s;
      launch_region_inputs_.push_back(tensor);
    } else {
      tensor = torch::from_blob(bytes, input.spec.shape, options);
    }
    inputs->emplace_back(PrepareInput(tensor));
  }
  return Status::Ok();
}

Status ComputeLoop::BuildPipelineInputs(const uint8_t* request, const ipc::RequestView& view,
                                        std::vector<c10::IValue>* inputs, int64_t* rows,
                                        ipc::PipelineOutcome* outcome, bool* run_model) {
  if (view.inputs.size() != 1) {
    return InvalidArgument("a pipeline model takes one input, the batch has " +
                           std::to_string(view.inputs.size()));
  }
  *rows = Rows(view.inputs[0].spec);
  ipc::SharedRegion* region = nullptr;
  if (!view.inputs[0].in_slot()) {
    Status s = AcquireClientRegion(view.regions[view.inputs[0].region_index()], &region);
    if (!s.ok()) return s;
  }
  const uint8_t* bytes = view.InputBytes(0, region ? region->data() : nullptr);
  if (region) {
    at::Tensor copy = at::empty({static_cast<int64_t>(view.inputs[0].nbytes)}, at::kByte);
    Status s = CopyOutOfRegion(*region, bytes, view.inputs[0].nbytes, copy.data_ptr());
    if (!s.ok()) return s;
    launch_region_inputs_.push_back(copy);
    bytes = copy.data_ptr<uint8_t>();
  }
  std::vector<c10::IValue> host;
  Status s = pipeline_->Prepare(request, view, bytes, &host, outcome, run_model);
  if (!s.ok()) return s;
  for (const c10::IValue& input : host) inputs->emplace_back(PrepareInput(input.toTensor()));
  return Status::Ok();
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
  if (elements.size() > kMaxOutputs) {
    return Internal("model returned " + std::to_string(elements.size()) +
                    " outputs; a reply holds at most " + std::to_string(kMaxOutputs));
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

Status ComputeLoop::WriteOutputs(const std::vector<at::Tensor>& tensors,
                                 const ipc::RequestView& request, uint8_t* response) {
  std::vector<TensorSpec> specs;
  for (const at::Tensor& tensor : tensors) {
    specs.push_back(TensorSpec{*FromScalarType(tensor.scalar_type()), tensor.sizes().vec()});
  }
  ipc::OutputPlacement placement;
  Status s = ipc::PlaceResponseOutputs(specs, request, segment_->data_capacity(), &placement);
  if (!s.ok()) return s;
  // In place: the client's output range (ReadRequest checked it lies in the region).
  ipc::SharedRegion* region = nullptr;
  if (!placement.in_slot()) {
    s = AcquireClientRegion(request.regions[placement.region_index()], &region);
    if (!s.ok()) return s;
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& tensor = tensors[i];
    if (tensor.nbytes() == 0) continue;
    // Straight into the response slot: one copy, asynchronous on a GPU lane. In place: into
    // private memory, copied into the client's region once the lane is done (FlushRegionWrites).
    uint8_t* bytes = ipc::OutputBytes(placement, i, response, region ? region->data() : nullptr);
    const auto options = at::TensorOptions().dtype(tensor.scalar_type());
    at::Tensor destination = region ? at::empty(tensor.sizes(), options)
                                    : torch::from_blob(bytes, tensor.sizes(), options);
    accelerator_->CopyToHost(tensor, destination);
    if (region) {
      launch_region_writes_.push_back(
          RegionWrite{region, static_cast<uint64_t>(bytes - region->data()), destination});
    }
  }
  ipc::WriteResponseOutputs(specs, placement, response);
  return Status::Ok();
}

}  // namespace torchfarm::worker
