// The one place that calls LibTorch APIs whose names or behaviour differ between LibTorch 1.13
// and 2.x: dtype mapping, thread-pool sizing, error text and output unpacking. Everything else in
// worker/ uses only calls that are stable across those versions.
//
// Owns: nothing (free functions). Called from the compute thread (worker/compute_loop.h), the one
// thread of the worker that touches torch; tools/mkmodel and tests use the dtype mapping too.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace torch::jit {
struct Module;
}  // namespace torch::jit

namespace torchfarm::worker {

// Disables autograd and version counting for the scope; cheaper than NoGradGuard.
using InferenceModeGuard = c10::InferenceMode;

c10::ScalarType ToScalarType(DType dtype);
// nullopt for torch types torchfarm does not carry (complex, quantized, ...).
std::optional<DType> FromScalarType(c10::ScalarType type);
// "Float", "ComplexFloat", ... as torch names them, for error messages.
std::string ScalarTypeName(c10::ScalarType type);

// The type of a `precision` value: "fp32" -> Float, "fp16" -> Half, "bf16" -> BFloat16; nullopt
// for anything else.
std::optional<c10::ScalarType> PrecisionType(const std::string& precision);
// Casts the module's floating-point parameters and buffers to `type`. Integer ones keep their type
// (Module::to(dtype) would cast them too: index tables, position ids, BatchNorm's
// num_batches_tracked).
void CastFloatingState(torch::jit::Module& module, c10::ScalarType type);

// Intra-op threads of the calling thread's parallel regions (at::set_num_threads).
void SetIntraOpThreads(int threads);
// The process-wide inter-op pool size. LibTorch allows this once and only before any inter-op
// work started; a later call is logged at warn and otherwise ignored.
void SetInterOpThreadsOnce(int threads);

// The torch message without the C++ backtrace that c10::Error::what() appends.
std::string ErrorText(const c10::Error& error);

// The elements of a tuple or list IValue; false (and `elements` untouched) for anything else.
bool UnpackSequence(const c10::IValue& value, std::vector<c10::IValue>* elements);
// "Tensor", "Tuple", "int", ... for error messages about what a model returned.
std::string IValueKind(const c10::IValue& value);

}  // namespace torchfarm::worker
