// Numbers from outside the process: config keys, admin commands, command-line flags and request
// header fields. Each is read as its real type within an explicit range; a value outside it, of
// another type, or one that would wrap or be truncated on the way (2^31 into an int, 2^64-1 read
// as -1, 1.5 read as 1) is refused with a message naming the key, the range and the value:
//   "KEY: expected an integer in MIN..MAX, got VALUE"
//
// Owns nothing; pure functions, safe on any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/status.h"

namespace torchfarm {

// "MIN..MAX", as every range is written in messages and docs.
std::string RangeText(int64_t min, int64_t max);

// The refusal every reader below returns: "KEY: expected an integer in MIN..MAX, got GOT".
Status IntegerOutOfRange(const std::string& key, int64_t min, int64_t max, const std::string& got);

// True when `value` is a JSON integer in [min, max]; *out gets it. nlohmann keeps integers above
// INT64_MAX as unsigned: those are out of every int64 range here, never wrapped to negatives.
bool JsonIntegerIn(const nlohmann::json& value, int64_t min, int64_t max, int64_t* out);

// `value` as an integer in [min, max], or the refusal naming `key` (the value shown as JSON after
// its type, as every config message shows it: "got number 5000", "got string \"5\"").
Status IntegerFromJson(const nlohmann::json& value, const std::string& key, int64_t min,
                       int64_t max, int64_t* out);

// Decimal text ("-12", "4096") as an integer in [min, max]: digits with an optional leading '-',
// nothing else (no spaces, '+', hex, exponent or fraction); errors quote the text.
Status IntegerFromText(std::string_view text, const std::string& key, int64_t min, int64_t max,
                       int64_t* out);

// Whether `value` is representable in Int (C++17's stand-in for std::in_range).
template <typename Int>
constexpr bool FitsIn(int64_t value) {
  if constexpr (std::is_signed_v<Int>) {
    return value >= static_cast<int64_t>(std::numeric_limits<Int>::min()) &&
           value <= static_cast<int64_t>(std::numeric_limits<Int>::max());
  } else {
    return value >= 0 && static_cast<uint64_t>(value) <= std::numeric_limits<Int>::max();
  }
}

// The same into another integer type. A range the type cannot hold is narrowed to the type's, and
// the message says so: the assignment never truncates.
template <typename Int>
Status IntegerFromJson(const nlohmann::json& value, const std::string& key, int64_t min,
                       int64_t max, Int* out) {
  static_assert(std::is_integral_v<Int> && sizeof(Int) <= sizeof(int64_t));
  if constexpr (!std::is_same_v<Int, int64_t>) {
    if (!FitsIn<Int>(min))
      min = std::is_signed_v<Int> ? static_cast<int64_t>(std::numeric_limits<Int>::min()) : 0;
    if (!FitsIn<Int>(max)) max = static_cast<int64_t>(std::numeric_limits<Int>::max());
  }
  int64_t wide = 0;
  if (Status s = IntegerFromJson(value, key, min, max, &wide); !s.ok()) return s;
  *out = static_cast<Int>(wide);
  return Status::Ok();
}

}  // namespace torchfarm
