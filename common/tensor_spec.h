// Dtype + shape of one tensor, and the checks that compare what a client sent with what a model
// declared.
//
// Owns: shape arithmetic with overflow checks, and the wording of shape/dtype mismatch errors
// ("expected float32 [-1, 256], got float32 [1, 255]"). Used by the supervisor (request checks),
// the client tools and tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace torchfarm {

// The most dimensions a tensor may have; fixed because shared-memory descriptors hold the shape
// inline (ipc/shm_layout.h).
inline constexpr int kMaxRank = 8;

struct TensorSpec {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // -1 marks a variable dimension in a model's declared inputs

  bool operator==(const TensorSpec& other) const {
    return dtype == other.dtype && shape == other.shape;
  }
};

// "[1, 256]"
std::string ShapeToString(const std::vector<int64_t>& shape);
// "float32 [1, 256]"
std::string SpecToString(const TensorSpec& spec);

// Number of elements, or nullopt for negative dims or overflow past 2^62. Inline, with ByteSize:
// both run several times a request (issue 36).
inline std::optional<uint64_t> NumElements(const std::vector<int64_t>& shape) {
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  uint64_t n = 1;
  for (int64_t d : shape) {
    // A multiply with its overflow flag, not a division a dimension; past kLimit (or wrapped) is
    // refused.
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > kLimit) {
      return std::nullopt;
    }
  }
  return n;
}
// Bytes of a C-contiguous tensor, or nullopt as above, and always for bytes tensors (their size
// is in their data: common/bytes_items.h).
inline std::optional<uint64_t> ByteSize(const TensorSpec& spec) {
  if (IsBytes(spec.dtype)) return std::nullopt;
  const auto n = NumElements(spec.shape);
  if (!n) return std::nullopt;
  const uint64_t size = DTypeSize(spec.dtype);
  if (*n > (uint64_t{1} << 62) / size) return std::nullopt;
  return *n * size;
}

// Checks a concrete tensor against a model's declared input (dtype equal, rank equal, every
// declared dim that is not -1 equal). The message names the input index, expected and received.
Status CheckAgainstDeclared(const TensorSpec& declared, const TensorSpec& got, size_t input_index);

// Rows along dim 0 (1 for scalars).
int64_t Rows(const TensorSpec& spec);

}  // namespace torchfarm
