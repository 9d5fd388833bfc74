#include "common/dtype.h"

#include <array>

namespace torchfarm {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
  std::string_view descr;
  std::string_view v2_name;  // the Open Inference Protocol's datatype
};

constexpr std::array<DTypeInfo, 11> kInfo = {{
    {DType::kFloat32, "float32", 4, "<f4", "FP32"},
    {DType::kFloat64, "float64", 8, "<f8", "FP64"},
    {DType::kFloat16, "float16", 2, "<f2", "FP16"},
    {DType::kBFloat16, "bfloat16", 2, "", "BF16"},
    {DType::kInt64, "int64", 8, "<i8", "INT64"},
    {DType::kInt32, "int32", 4, "<i4", "INT32"},
    {DType::kInt16, "int16", 2, "<i2", "INT16"},
    {DType::kInt8, "int8", 1, "|i1", "INT8"},
    {DType::kUInt8, "uint8", 1, "|u1", "UINT8"},
    {DType::kBool, "bool", 1, "|b1", "BOOL"},
    // Size 1: one byte of the item stream; ByteSize() refuses it (tensor_spec.h). No .npy form.
    {DType::kBytes, "bytes", 1, "", "BYTES"},
}};

constexpr bool SizesAgree() {
  for (const auto& info : kInfo) {
    if (DTypeSize(info.dtype) != info.size) return false;
  }
  return true;
}
static_assert(SizesAgree(), "DTypeSize (dtype.h) disagrees with kInfo's sizes");

const DTypeInfo& Info(DType dtype) {
  for (const auto& info : kInfo) {
    if (info.dtype == dtype) return info;
  }
  return kInfo[0];  // unreachable for valid enum values
}

}  // namespace

std::optional<DType> ParseDType(std::string_view numpy_name) {
  for (const auto& info : kInfo) {
    if (info.name == numpy_name) return info.dtype;
  }
  return std::nullopt;
}

std::optional<DType> DTypeFromCode(uint8_t code) {
  for (const auto& info : kInfo) {
    if (static_cast<uint8_t>(info.dtype) == code) return info.dtype;
  }
  return std::nullopt;
}

std::string_view DTypeName(DType dtype) { return Info(dtype).name; }
std::string_view DTypeNumpyDescr(DType dtype) { return Info(dtype).descr; }

std::string_view V2DatatypeName(DType dtype) { return Info(dtype).v2_name; }

std::optional<DType> DTypeFromV2Name(std::string_view v2_name) {
  for (const auto& info : kInfo) {
    if (IsBytes(info.dtype)) continue;  // not carried by the v2 front ends yet
    if (info.v2_name == v2_name) return info.dtype;
  }
  return std::nullopt;
}

std::string AllV2DatatypeNames() {
  std::string out;
  for (const auto& info : kInfo) {
    if (IsBytes(info.dtype)) continue;
    if (!out.empty()) out += ", ";
    out += info.v2_name;
  }
  return out;
}

std::optional<DType> DTypeFromNumpyDescr(std::string_view descr) {
  // Single-byte types may be written with '|' or without a byte-order mark; '=' means native,
  // which is little-endian on every platform torchfarm supports.
  if (descr.size() == 3 && (descr[0] == '=' || descr[0] == '|')) {
    std::string little = "<" + std::string(descr.substr(1));
    std::string any = "|" + std::string(descr.substr(1));
    for (const auto& info : kInfo) {
      if (!info.descr.empty() && (info.descr == little || info.descr == any)) return info.dtype;
    }
    return std::nullopt;
  }
  for (const auto& info : kInfo) {
    if (!info.descr.empty() && info.descr == descr) return info.dtype;
  }
  if (descr == "<i1" || descr == "<u1" || descr == "<b1") return DTypeFromNumpyDescr("|" + std::string(descr.substr(1)));
  return std::nullopt;
}

std::string AllDTypeNames() {
  std::string out;
  for (const auto& info : kInfo) {
    if (!out.empty()) out += ", ";
    out += info.name;
  }
  return out;
}

}  // namespace torchfarm
