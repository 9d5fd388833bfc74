#include "common/number_parse.h"

#include <charconv>

namespace torchfarm {

namespace {
constexpr size_t kMaxQuoted = 64;  // characters of a refused value a message repeats
}  // namespace

std::string RangeText(int64_t min, int64_t max) {
  return std::to_string(min) + ".." + std::to_string(max);
}

Status IntegerOutOfRange(const std::string& key, int64_t min, int64_t max, const std::string& got) {
  return InvalidArgument(key + ": expected an integer in " + RangeText(min, max) + ", got " +
                         (got.size() > kMaxQuoted ? got.substr(0, kMaxQuoted) + "..." : got));
}

bool JsonIntegerIn(const nlohmann::json& value, int64_t min, int64_t max, int64_t* out) {
  if (value.is_number_unsigned()) {
    // Above INT64_MAX it is beyond every range; get<int64_t>() would wrap it to a negative.
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    const auto signed_v = static_cast<int64_t>(v);
    if (signed_v < min || signed_v > max) return false;
    *out = signed_v;
    return true;
  }
  if (!value.is_number_integer()) return false;  // floats, strings, booleans, null
  const int64_t v = value.get<int64_t>();
  if (v < min || v > max) return false;
  *out = v;
  return true;
}

Status IntegerFromJson(const nlohmann::json& value, const std::string& key, int64_t min,
                       int64_t max, int64_t* out) {
  if (JsonIntegerIn(value, min, max, out)) return Status::Ok();
  const std::string shown = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return IntegerOutOfRange(key, min, max, std::string(value.type_name()) + " " + shown);
}

Status IntegerFromText(std::string_view text, const std::string& key, int64_t min, int64_t max,
                       int64_t* out) {
  const std::string quoted =
      "'" + std::string(text.substr(0, kMaxQuoted)) + (text.size() > kMaxQuoted ? "...'" : "'");
  // from_chars accepts exactly [-]digits; it reports values past int64 as out of range instead
  // of saturating or wrapping.
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, v);
  if (text.empty() || error != std::errc() || stop != end || v < min || v > max) {
    return InvalidArgument(key + ": expected an integer in " + RangeText(min, max) + ", got " +
                           quoted);
  }
  *out = v;
  return Status::Ok();
}

}  // namespace torchfarm
