// Optional helpers between LibTorch's at::Tensor and the client's TensorView (inputs) and Tensor
// (outputs). Header-only: include it only in programs that link LibTorch; torchfarm_client itself
// never does, so the client library stays usable without LibTorch.
//
//   at::Tensor x = ContiguousCpu(images);           // no copy when already CPU + contiguous
//   TensorView view;
//   Status s = ViewTensor(x, &view);                 // x must outlive the call that sends view
//   s = client.Infer("convnet", {view}, &result);
//   at::Tensor logits;
//   s = ToTorch(std::move(result.outputs[0]), &logits);  // takes over the bytes, no copy
//
// Owns: nothing (inline free functions). Any thread. Assumes a little-endian host, as the wire
// protocol's raw frames do.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "common/tensor_spec.h"
#include "torchfarm/client.h"

namespace torchfarm {

inline c10::ScalarType ScalarTypeFromDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return c10::ScalarType::Float;
    case DType::kFloat64: return c10::ScalarType::Double;
    case DType::kFloat16: return c10::ScalarType::Half;
    case DType::kBFloat16: return c10::ScalarType::BFloat16;
    case DType::kInt64: return c10::ScalarType::Long;
    case DType::kInt32: return c10::ScalarType::Int;
    case DType::kInt16: return c10::ScalarType::Short;
    case DType::kInt8: return c10::ScalarType::Char;
    case DType::kUInt8: return c10::ScalarType::Byte;
    case DType::kBool: return c10::ScalarType::Bool;
  }
  return c10::ScalarType::Undefined;
}

// nullopt for torch types the wire protocol does not carry (complex, quantized, ...).
inline std::optional<DType> DTypeFromScalarType(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float: return DType::kFloat32;
    case c10::ScalarType::Double: return DType::kFloat64;
    case c10::ScalarType::Half: return DType::kFloat16;
    case c10::ScalarType::BFloat16: return DType::kBFloat16;
    case c10::ScalarType::Long: return DType::kInt64;
    case c10::ScalarType::Int: return DType::kInt32;
    case c10::ScalarType::Short: return DType::kInt16;
    case c10::ScalarType::Char: return DType::kInt8;
    case c10::ScalarType::Byte: return DType::kUInt8;
    case c10::ScalarType::Bool: return DType::kBool;
    default: return std::nullopt;
  }
}

// `tensor` on the CPU and C-contiguous; returns `tensor` itself (no copy) when it already is.
inline at::Tensor ContiguousCpu(const at::Tensor& tensor) {
  return tensor.to(at::kCPU).contiguous();
}

// A non-owning view of a CPU, C-contiguous tensor's bytes for Client::Infer/Send. The tensor must
// stay alive (and unchanged) until the call that sends the view returns. INVALID_ARGUMENT for
// other devices, non-contiguous layouts or dtypes the protocol lacks.
inline Status ViewTensor(const at::Tensor& tensor, TensorView* view) {
  if (!tensor.defined()) return InvalidArgument("undefined tensor");
  if (!tensor.device().is_cpu()) {
    return InvalidArgument("tensor on " + tensor.device().str() + ": call ContiguousCpu() first");
  }
  if (!tensor.is_contiguous()) {
    return InvalidArgument("tensor is not contiguous: call ContiguousCpu() first");
  }
  std::optional<DType> dtype = DTypeFromScalarType(tensor.scalar_type());
  if (!dtype) {
    return InvalidArgument(std::string("dtype ") + c10::toString(tensor.scalar_type()) +
                           " is not carried by the wire protocol (" + AllDTypeNames() + ")");
  }
  view->spec.dtype = *dtype;
  view->spec.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
  view->data = tensor.data_ptr();
  view->nbytes = tensor.numel() * tensor.element_size();
  return Status::Ok();
}

// An owning copy of a tensor (any device or layout), e.g. to build expected outputs in tests.
inline Status CopyFromTorch(const at::Tensor& tensor, Tensor* out) {
  at::Tensor cpu = tensor.defined() ? ContiguousCpu(tensor) : tensor;
  TensorView view;
  if (Status s = ViewTensor(cpu, &view); !s.ok()) return s;
  out->spec = view.spec;
  out->data.assign(static_cast<const char*>(view.data), view.nbytes);
  return Status::Ok();
}

namespace torch_tensor_detail {

inline Status CheckOutput(const Tensor& output, std::vector<int64_t>* sizes) {
  std::optional<uint64_t> bytes = ByteSize(output.spec);
  if (!bytes || *bytes != output.data.size()) {
    return InvalidArgument("output of " + SpecToString(output.spec) + " holds " +
                           std::to_string(output.data.size()) + " bytes");
  }
  *sizes = output.spec.shape;
  return Status::Ok();
}

inline at::TensorOptions OptionsFor(DType dtype) {
  return at::TensorOptions().dtype(ScalarTypeFromDType(dtype)).device(at::kCPU);
}

}  // namespace torch_tensor_detail

// A CPU tensor holding a copy of `output`'s bytes; `output` is left as it was.
inline Status CopyToTorch(const Tensor& output, at::Tensor* out) {
  std::vector<int64_t> sizes;
  if (Status s = torch_tensor_detail::CheckOutput(output, &sizes); !s.ok()) return s;
  at::Tensor tensor = at::empty(sizes, torch_tensor_detail::OptionsFor(output.spec.dtype));
  if (!output.data.empty()) std::memcpy(tensor.data_ptr(), output.data.data(), output.data.size());
  *out = std::move(tensor);
  return Status::Ok();
}

// A CPU tensor over `output`'s bytes without copying them: the bytes move into a heap block the
// tensor frees when its storage dies; `output.data` is left empty. Falls back to a copy when the
// bytes are not aligned for the dtype (only possible for tiny outputs kept inside std::string).
inline Status ToTorch(Tensor&& output, at::Tensor* out) {
  std::vector<int64_t> sizes;
  if (Status s = torch_tensor_detail::CheckOutput(output, &sizes); !s.ok()) return s;
  auto owner = std::make_unique<std::string>(std::move(output.data));
  output.data.clear();
  void* data = owner->data();
  if (reinterpret_cast<uintptr_t>(data) % DTypeSize(output.spec.dtype) != 0) {
    return CopyToTorch(Tensor{output.spec, std::move(*owner), output.name}, out);
  }
  std::string* raw_owner = owner.release();
  *out = at::from_blob(
      data, sizes, [raw_owner](void*) { delete raw_owner; },
      torch_tensor_detail::OptionsFor(output.spec.dtype));
  return Status::Ok();
}

}  // namespace torchfarm
