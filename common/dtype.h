// Element types of tensors on the wire, in shared memory and in .npy files.
//
// Owns: the mapping between numpy dtype names ("float32"), numpy array-protocol descriptors
// ("<f4"), Open Inference Protocol datatypes ("FP32"), element sizes and the small integer code
// stored in shared-memory tensor descriptors.
// No LibTorch here: the worker maps DType to at::ScalarType in worker/torch_compat.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace torchfarm {

// The numeric values are part of the shared-memory layout (ipc/shm_layout.h): never renumber.
enum class DType : uint8_t {
  kFloat32 = 1,
  kFloat64 = 2,
  kFloat16 = 3,
  kBFloat16 = 4,
  kInt64 = 5,
  kInt32 = 6,
  kInt16 = 7,
  kInt8 = 8,
  kUInt8 = 9,
  kBool = 10,
  // Variable-length byte strings (an encoded image): a tensor of shape [N] whose data is N items,
  // each a 4-byte little-endian length and that many bytes (Triton's BYTES layout;
  // common/bytes_items.h). Its byte size follows from the data, not from the shape: ByteSize()
  // has none, and no model input or output tensor has this type (the worker's pipeline decodes it,
  // worker/pipeline_stages.h).
  kBytes = 11,
};

// True for kBytes: the dtype whose size the shape does not determine.
inline bool IsBytes(DType dtype) { return dtype == DType::kBytes; }

std::optional<DType> ParseDType(std::string_view numpy_name);
std::optional<DType> DTypeFromCode(uint8_t code);
std::string_view DTypeName(DType dtype);
// Bytes per element, by the enum's value (index 0 unused; an unknown value reads as float32's, as
// the other lookups do). Inline: sizes are asked several times a request (issue 36); dtype.cc
// checks the table against its own.
constexpr size_t DTypeSize(DType dtype) {
  constexpr uint8_t kSizes[] = {4, 4, 8, 2, 2, 8, 4, 2, 1, 1, 1, 1};
  const auto code = static_cast<uint8_t>(dtype);
  return code < sizeof(kSizes) ? kSizes[code] : 4;
}
// numpy's array-protocol descriptor ("<f4", "|u1"); empty for bfloat16, which numpy lacks.
std::string_view DTypeNumpyDescr(DType dtype);
std::optional<DType> DTypeFromNumpyDescr(std::string_view descr);
// The Open Inference Protocol (KServe v2) datatype: "FP32", "INT64", "BOOL"... (docs/kserve-v2.md).
// v2 types torchfarm cannot carry (UINT16..UINT64) have no DType: nullopt. kBytes maps to BYTES
// only in this table: the v2 front ends do not accept BYTES inputs yet (docs/kserve-v2.md).
std::string_view V2DatatypeName(DType dtype);
std::optional<DType> DTypeFromV2Name(std::string_view v2_name);
// "FP32, FP64, ..." for error messages (the types the v2 front ends accept: no BYTES).
std::string AllV2DatatypeNames();
// "float32, float64, ..." for error messages.
std::string AllDTypeNames();

}  // namespace torchfarm
