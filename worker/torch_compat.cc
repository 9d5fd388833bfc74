#include "worker/torch_compat.h"

#include <ATen/Parallel.h>
#include <torch/script.h>

#include "common/log.h"

namespace torchfarm::worker {

std::optional<c10::ScalarType> PrecisionType(const std::string& precision) {
  if (precision == "fp32") return c10::kFloat;
  if (precision == "fp16") return c10::kHalf;
  if (precision == "bf16") return c10::kBFloat16;
  return std::nullopt;
}

void CastFloatingState(torch::jit::Module& module, c10::ScalarType type) {
  at::NoGradGuard no_grad;  // a cast of a parameter that requires grad must not be recorded
  for (at::Tensor tensor : module.parameters()) {
    if (tensor.is_floating_point()) tensor.set_data(tensor.to(type));
  }
  for (at::Tensor tensor : module.buffers()) {
    if (tensor.is_floating_point()) tensor.set_data(tensor.to(type));
  }
}

c10::ScalarType ToScalarType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return c10::ScalarType::Float;
    case DType::kFloat64:
      return c10::ScalarType::Double;
    case DType::kFloat16:
      return c10::ScalarType::Half;
    case DType::kBFloat16:
      return c10::ScalarType::BFloat16;
    case DType::kInt64:
      return c10::ScalarType::Long;
    case DType::kInt32:
      return c10::ScalarType::Int;
    case DType::kInt16:
      return c10::ScalarType::Short;
    case DType::kInt8:
      return c10::ScalarType::Char;
    case DType::kUInt8:
      return c10::ScalarType::Byte;
    case DType::kBool:
      return c10::ScalarType::Bool;
  }
  // DType values come from DTypeFromCode, which admits only the cases above.
  return c10::ScalarType::Undefined;
}

std::optional<DType> FromScalarType(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return DType::kFloat32;
    case c10::ScalarType::Double:
      return DType::kFloat64;
    case c10::ScalarType::Half:
      return DType::kFloat16;
    case c10::ScalarType::BFloat16:
      return DType::kBFloat16;
    case c10::ScalarType::Long:
      return DType::kInt64;
    case c10::ScalarType::Int:
      return DType::kInt32;
    case c10::ScalarType::Short:
      return DType::kInt16;
    case c10::ScalarType::Char:
      return DType::kInt8;
    case c10::ScalarType::Byte:
      return DType::kUInt8;
    case c10::ScalarType::Bool:
      return DType::kBool;
    default:
      return std::nullopt;
  }
}

std::string ScalarTypeName(c10::ScalarType type) { return c10::toString(type); }

void SetIntraOpThreads(int threads) { at::set_num_threads(threads); }

void SetInterOpThreadsOnce(int threads) {
  // Reading the size does not start the pool; skip the call (and its warning) when nothing changes.
  if (at::get_num_interop_threads() == threads) return;
  try {
    at::set_num_interop_threads(threads);
  } catch (const c10::Error& e) {
    // Happens when the pool already exists (a second model in one test process); the pool keeps
    // its size, which only matters for models that fork inter-op work.
    TF_LOG(kWarn) << "cannot set inter-op threads" << Kv("wanted", threads)
                  << Kv("current", at::get_num_interop_threads()) << Kv("error", ErrorText(e));
  }
}

std::string ErrorText(const c10::Error& error) { return error.what_without_backtrace(); }

bool UnpackSequence(const c10::IValue& value, std::vector<c10::IValue>* elements) {
  if (value.isTuple()) {
    const auto& tuple = value.toTupleRef().elements();
    elements->assign(tuple.begin(), tuple.end());
    return true;
  }
  if (value.isList()) {
    auto list = value.toListRef();
    elements->assign(list.begin(), list.end());
    return true;
  }
  return false;
}

std::string IValueKind(const c10::IValue& value) { return value.tagKind(); }

}  // namespace torchfarm::worker
