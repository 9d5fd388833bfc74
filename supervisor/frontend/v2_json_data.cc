// JSON numbers <-> tensor bytes (v2_json_data.h). Elements are copied with memcpy: frames carry no
// alignment promise. Floats print with std::to_chars' shortest form, which reads back exactly
// (WriteShortestFloat's for float, the same text).
#include "supervisor/frontend/v2_json_data.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/float_text.h"
#include "common/tensor_spec.h"

namespace torchfarm {
namespace {

using nlohmann::json;

// Largest finite value of each type, and the magnitude from which a value rounds to infinity
// (half an ulp above the largest: round to nearest even takes the tie to infinity).
struct FloatRange {
  double largest;
  double rounds_to_infinity;
};
constexpr FloatRange kHalfRange = {65504.0, 65520.0};
constexpr FloatRange kBFloat16Range = {3.3895313892515355e38, 3.3961775292304077e38};
constexpr FloatRange kFloatRange = {3.4028234663852886e38, kFloat32RoundsToInfinity};
constexpr FloatRange kDoubleRange = {std::numeric_limits<double>::max(),
                                     std::numeric_limits<double>::infinity()};

// `value` as a float rounded to odd: exact when it fits, else the neighbour of the two around it
// whose last mantissa bit is 1. A float keeps 13 (16) more bits than a half (bfloat16), so
// rounding this float to nearest even gives what rounding `value` itself would; rounding to the
// nearest float first could land on a tie of the narrow type that `value` was not.
float FloatRoundedToOdd(double value) {
  float f = static_cast<float>(value);
  if (static_cast<double>(f) == value || std::isnan(value)) return f;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 1) == 0) {
    f = std::nextafter(f, value > f ? std::numeric_limits<float>::infinity()
                                    : -std::numeric_limits<float>::infinity());
  }
  return f;
}

const FloatRange& RangeOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return kHalfRange;
    case DType::kBFloat16:
      return kBFloat16Range;
    case DType::kFloat32:
      return kFloatRange;
    default:
      return kDoubleRange;
  }
}

// Writes the leaves of `data` one by one, checking each against the datatype.
class LeafWriter {
 public:
  LeafWriter(DType dtype, const std::string& datatype, const std::string& where, char* dst)
      : dtype_(dtype), datatype_(datatype), where_(where), dst_(dst) {}

  Status Walk(const json& value) {
    if (!value.is_array()) return Write(value);
    for (const json& item : value) {
      if (Status s = Walk(item); !s.ok()) return s;
    }
    return Status::Ok();
  }

 private:
  std::string At() const { return where_ + "[" + std::to_string(index_) + "]"; }

  template <typename T>
  void Put(T value) {
    std::memcpy(dst_, &value, sizeof(T));
    dst_ += sizeof(T);
    ++index_;
  }

  template <typename T>
  Status PutInteger(const json& value) {
    constexpr auto kMin = std::numeric_limits<T>::min();
    constexpr auto kMax = std::numeric_limits<T>::max();
    bool fits = false;
    if (value.is_number_unsigned()) {
      fits = value.get<uint64_t>() <= static_cast<uint64_t>(kMax);
    } else if (value.is_number_integer()) {
      const int64_t v = value.get<int64_t>();
      fits = v >= static_cast<int64_t>(kMin) &&
             (v < 0 || static_cast<uint64_t>(v) <= static_cast<uint64_t>(kMax));
    }
    if (!fits) {
      return InvalidArgument(At() + ": expected an integer in " + std::to_string(kMin) + ".." +
                             std::to_string(kMax) + " for " + datatype_ + ", got " +
                             value.dump());
    }
    if (value.is_number_unsigned()) {
      Put(static_cast<T>(value.get<uint64_t>()));
    } else {
      Put(static_cast<T>(value.get<int64_t>()));
    }
    return Status::Ok();
  }

  // Checks the type; EncodeJsonFloat checks the range, also of FP16 and BF16 values just under
  // the limit that still round to infinity.
  Status PutFloating(const json& value) {
    if (!value.is_number()) {
      return InvalidArgument(At() + ": expected a number for " + datatype_ + ", got " +
                             value.dump());
    }
    if (!EncodeJsonFloat(dtype_, value.get<double>(), dst_)) {
      return InvalidArgument(At() + ": " + value.dump() + " is out of the " + datatype_ +
                             " range (largest magnitude " + Shortest(RangeOf(dtype_).largest) +
                             ")");
    }
    dst_ += DTypeSize(dtype_);
    ++index_;
    return Status::Ok();
  }

  static std::string Shortest(double value) {
    char text[32];
    auto result = std::to_chars(text, text + sizeof(text), value);
    return std::string(text, result.ptr);
  }

  Status Write(const json& value) {
    switch (dtype_) {
      case DType::kBool:
        if (!value.is_boolean()) {
          return InvalidArgument(At() + ": expected true or false for BOOL, got " + value.dump());
        }
        Put(static_cast<uint8_t>(value.get<bool>() ? 1 : 0));
        return Status::Ok();
      case DType::kInt8: return PutInteger<int8_t>(value);
      case DType::kInt16: return PutInteger<int16_t>(value);
      case DType::kInt32: return PutInteger<int32_t>(value);
      case DType::kInt64: return PutInteger<int64_t>(value);
      case DType::kUInt8: return PutInteger<uint8_t>(value);
      case DType::kFloat64:
      case DType::kFloat32:
      case DType::kFloat16:
      case DType::kBFloat16:
        return PutFloating(value);
    }
    return Internal(At() + ": unhandled dtype " + std::string(DTypeName(dtype_)));
  }

  DType dtype_;
  const std::string& datatype_;
  const std::string& where_;
  char* dst_;
  uint64_t index_ = 0;
};

template <typename T>
T Load(const char* bytes, size_t index) {
  T value;
  std::memcpy(&value, bytes + index * sizeof(T), sizeof(T));
  return value;
}

// The most characters one element of `dtype` takes in the text: "false", "-128", "-32768",
// int32's and int64's minimum, "255", a float's to_chars form (float_text.h) or "null", a
// double's ("-2.2250738585072014e-308").
size_t MaxElementChars(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return 5;
    case DType::kInt8:
      return 4;
    case DType::kInt16:
      return 6;
    case DType::kInt32:
      return 11;
    case DType::kInt64:
      return 20;
    case DType::kUInt8:
      return 3;
    case DType::kFloat64:
      return 24;
    case DType::kFloat32:
    case DType::kFloat16:
    case DType::kBFloat16:
      return kMaxShortestFloatChars;
  }
  return 24;
}

// Writes value at `out`, which has room for MaxElementChars before `last`; returns the end.
template <typename T>
__attribute__((always_inline)) inline char* WriteNumber(T value, char* out, char* last) {
  if constexpr (std::is_same_v<T, float>) {  // finite and not -0, the usual float, in one test
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    if (((bits >> 23) & 0xff) != 0xff && bits != 0x80000000u) return WriteShortestFloat(out, value);
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) {
      std::memcpy(out, "null", 4);
      return out + 4;
    }
    if (value == 0 && std::signbit(value)) {
      std::memcpy(out, "-0.0", 4);  // "-0" would read back as the integer 0
      return out + 4;
    }
  }
  return std::to_chars(out, last, value).ptr;
}

}  // namespace

uint64_t JsonDataCount(const json& data) {
  if (!data.is_array()) return 1;
  uint64_t count = 0;
  for (const json& item : data) count += JsonDataCount(item);
  return count;
}

Status DecodeJsonData(const json& data, DType dtype, const std::string& datatype,
                      const std::vector<int64_t>& shape, const std::string& where,
                      zmq::message_t* out) {
  const std::optional<uint64_t> expected = NumElements(shape);
  if (!expected) {
    return InvalidArgument(where + ": shape " + ShapeToString(shape) +
                           " must have dimensions >= 0 and fewer than 2^62 elements");
  }
  if (!data.is_array()) {
    return InvalidArgument(where + ": expected an array of " + std::to_string(*expected) + " " +
                           datatype + " values, got " + std::string(data.type_name()));
  }
  const uint64_t got = JsonDataCount(data);
  if (got != *expected) {
    return InvalidArgument(where + ": expected " + std::to_string(*expected) + " " + datatype +
                           " values for shape " + ShapeToString(shape) + ", got " +
                           std::to_string(got));
  }
  // Each element takes at least one byte of JSON, so this size is bounded by the body's.
  zmq::message_t bytes(static_cast<size_t>(got * DTypeSize(dtype)));
  LeafWriter writer(dtype, datatype, where, static_cast<char*>(bytes.data()));
  if (Status s = writer.Walk(data); !s.ok()) return s;
  *out = std::move(bytes);
  return Status::Ok();
}

bool EncodeJsonFloat(DType dtype, double value, void* dst) {
  if (dtype == DType::kFloat32) return EncodeJsonFloat32(value, dst);
  if (std::fabs(value) >= RangeOf(dtype).rounds_to_infinity) return false;
  switch (dtype) {
    case DType::kFloat64:
      std::memcpy(dst, &value, sizeof(value));
      return true;
    case DType::kFloat16:
    case DType::kBFloat16: {
      // Through float rounded to odd: a value just under the limit may still round to infinity.
      const bool half = dtype == DType::kFloat16;
      const float f = FloatRoundedToOdd(value);
      const uint16_t bits = half ? FloatToHalf(f) : FloatToBFloat16(f);
      if ((bits & 0x7fff) == (half ? 0x7c00 : 0x7f80)) return false;
      std::memcpy(dst, &bits, sizeof(bits));
      return true;
    }
    default:
      return false;
  }
}

namespace {

// AppendJsonData's loop for one element type, chosen once: write(i, at, end) writes element i at
// `at` (room for MaxElementChars before `end`) and returns its end. Written into a stack chunk and
// appended a chunk at a time: no append's checks per number, and no zero-filled room (resize)
// written twice. Each element is followed by a comma; the last comma becomes the ']'.
template <typename Write>
void AppendElements(size_t count, size_t room, std::string* out, Write write) {
  char chunk[2048];
  char* const end = chunk + sizeof(chunk);
  char* at = chunk;
  *at++ = '[';
  for (size_t i = 0; i < count; ++i) {
    if (static_cast<size_t>(end - at) < room) {
      out->append(chunk, static_cast<size_t>(at - chunk));
      at = chunk;
    }
    at = write(i, at, end);
    *at++ = ',';
  }
  if (count > 0) --at;
  *at++ = ']';
  out->append(chunk, static_cast<size_t>(at - chunk));
}

}  // namespace

void AppendJsonData(DType dtype, const void* bytes, size_t count, std::string* out) {
  const char* p = static_cast<const char*>(bytes);
  // Room for short numbers, never more than the longest text: a large UINT8 tensor reserves its
  // 4 bytes an element, not 12.
  out->reserve(out->size() + 2 + count * std::min<size_t>(12, MaxElementChars(dtype) + 1));
  const size_t room = MaxElementChars(dtype) + 2;  // the element, a comma, and the closing ']'
  // The numeric types: element i as `load` reads it, written by WriteNumber.
  auto numbers = [&](auto load) {
    AppendElements(count, room, out,
                   [load](size_t i, char* at, char* end) { return WriteNumber(load(i), at, end); });
  };
  switch (dtype) {
    case DType::kBool:
      return AppendElements(count, room, out, [p](size_t i, char* at, char*) {
        if (Load<uint8_t>(p, i)) {
          std::memcpy(at, "true", 4);
          return at + 4;
        }
        std::memcpy(at, "false", 5);
        return at + 5;
      });
    case DType::kInt8:
      return numbers([p](size_t i) { return static_cast<int>(Load<int8_t>(p, i)); });
    case DType::kInt16:
      return numbers([p](size_t i) { return Load<int16_t>(p, i); });
    case DType::kInt32:
      return numbers([p](size_t i) { return Load<int32_t>(p, i); });
    case DType::kInt64:
      return numbers([p](size_t i) { return Load<int64_t>(p, i); });
    case DType::kUInt8:
      return numbers([p](size_t i) { return static_cast<unsigned>(Load<uint8_t>(p, i)); });
    case DType::kFloat32:
      return numbers([p](size_t i) { return Load<float>(p, i); });
    case DType::kFloat64:
      return numbers([p](size_t i) { return Load<double>(p, i); });
    case DType::kFloat16:
      return numbers([p](size_t i) { return HalfToFloat(Load<uint16_t>(p, i)); });
    case DType::kBFloat16:
      return numbers([p](size_t i) { return BFloat16ToFloat(Load<uint16_t>(p, i)); });
    case DType::kBytes:
      break;  // BYTES text is BytesDataJson's, never written here
  }
  out->append("[]");
}

uint16_t FloatToHalf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t magnitude = x & 0x7fffffff;
  if (magnitude >= 0x7f800000) {  // infinity or NaN (a quiet NaN keeps its top payload bits)
    if (magnitude == 0x7f800000) return sign | 0x7c00;
    return static_cast<uint16_t>(sign | 0x7e00 | ((magnitude >> 13) & 0x3ff));
  }
  if (magnitude >= 0x477ff000) return sign | 0x7c00;  // >= 65520 rounds past the largest half
  if (magnitude < 0x38800000) {                        // below 2^-14: a subnormal half
    float scaled;
    std::memcpy(&scaled, &magnitude, sizeof(scaled));
    // Units of 2^-24; nearbyint rounds to nearest even; 1024 is the smallest normal, as it should.
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled * 16777216.0f)));
  }
  const uint32_t exponent = (magnitude >> 23) - 127 + 15;
  const uint32_t mantissa = magnitude & 0x7fffff;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;  // a carry moves into the exponent
  return static_cast<uint16_t>(sign | half);
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ff;
  uint32_t x;
  if (exponent == 0) {
    float value = static_cast<float>(mantissa) / 16777216.0f;  // exact: mantissa x 2^-24
    std::memcpy(&x, &value, sizeof(x));
    x |= sign;
  } else if (exponent == 31) {
    x = sign | 0x7f800000 | (mantissa << 13);
  } else {
    x = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  }
  float result;
  std::memcpy(&result, &x, sizeof(result));
  return result;
}

uint16_t FloatToBFloat16(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

float BFloat16ToFloat(uint16_t bits) {
  const uint32_t x = static_cast<uint32_t>(bits) << 16;
  float result;
  std::memcpy(&result, &x, sizeof(result));
  return result;
}

}  // namespace torchfarm
