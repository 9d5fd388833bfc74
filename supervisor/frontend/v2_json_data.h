// Tensor elements as JSON numbers, both ways, for the v2 HTTP codec (v2_http_codec.h).
//
// Owns: reading a v2 "data" array (flat or nested, row-major) into little-endian bytes with every
// element checked against its datatype's range, and printing bytes back as a JSON array whose
// numbers parse to the same bits (shortest round-trip form; FP16 and BF16 widen to float exactly).
// Also the FP16/BF16 <-> float conversions this needs. Pure functions; any thread.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/dtype.h"
#include "common/status.h"

namespace torchfarm {

// Leaves of a (possibly nested) array; a scalar counts as one.
uint64_t JsonDataCount(const nlohmann::json& data);

// Fills `out` with prod(shape) elements of `dtype` read from `data`. `where` names the field
// ("inputs[0].data"), `datatype` the v2 name for messages: "inputs[0].data: expected 6 FP32 values
// for shape [2, 3], got 5"; "inputs[0].data[4]: expected an integer in -128..127 for INT8, got 300".
Status DecodeJsonData(const nlohmann::json& data, DType dtype, const std::string& datatype,
                      const std::vector<int64_t>& shape, const std::string& where,
                      zmq::message_t* out);

// One element of the floating `dtype` (FP16, BF16, FP32, FP64) for the JSON number `value` (as a
// double, the way nlohmann reads it), written at `dst` (any alignment) as DecodeJsonData writes
// it. False, with nothing written, when `value` is past the dtype's range or `dtype` is not
// floating. Shared with the request scanner (v2_request_scanner.h) so the two cannot drift.
bool EncodeJsonFloat(DType dtype, double value, void* dst);

// EncodeJsonFloat's FP32 case, inline for the scanner's per-number loop: from this magnitude up
// (half an ulp past the largest float) a value rounds to infinity and is refused.
inline constexpr double kFloat32RoundsToInfinity = 3.4028235677973366e38;
inline bool EncodeJsonFloat32(double value, void* dst) {
  if (std::fabs(value) >= kFloat32RoundsToInfinity) return false;
  const float f = static_cast<float>(value);
  std::memcpy(dst, &f, sizeof(f));
  return true;
}

// Appends `[v0,v1,...]` for `count` elements of `dtype` at `bytes` (any alignment). A NaN or
// infinity, which JSON cannot carry, is written as null (binary_data keeps them).
void AppendJsonData(DType dtype, const void* bytes, size_t count, std::string* out);

uint16_t FloatToHalf(float value);     // round to nearest even; overflow gives infinity
float HalfToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);  // round to nearest even; NaN stays NaN
float BFloat16ToFloat(uint16_t bits);

}  // namespace torchfarm
