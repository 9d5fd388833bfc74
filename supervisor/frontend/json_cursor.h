// A cursor over JSON text for the single-pass scanners of request bodies (v2_request_scanner.h),
// and the JSON number as nlohmann's lexer types it, so a scanner can promise the DOM path's result.
//
// Owns: the subset of JSON the fast paths read themselves (ASCII strings without escapes, the
// four JSON whitespace bytes, numbers in JSON's grammar, the nesting bound kMaxV2JsonDepth of
// v2_http_codec.h); every method returns false on anything outside it, and the caller gives the
// text to the DOM path. Header-only so the per-number calls inline. Any thread; one cursor per
// scan.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "supervisor/frontend/v2_http_codec.h"

namespace torchfarm {

// A JSON number as nlohmann's lexer types it: without '-' and within uint64, unsigned; with '-'
// and within int64, signed; with a fraction or an exponent, a float (kept as text until needed).
struct JsonNumber {
  enum Kind { kUnsigned, kSigned, kFloat } kind = kUnsigned;
  uint64_t unsigned_value = 0;
  int64_t signed_value = 0;
  std::string_view text;

  // An integer 0..max, as GetNonNegative accepts it ("-0" included).
  bool NonNegative(uint64_t max, uint64_t* out) const {
    if (kind == kFloat || (kind == kSigned && signed_value != 0)) return false;
    const uint64_t value = kind == kUnsigned ? unsigned_value : 0;
    if (value > max) return false;
    *out = value;
    return true;
  }
  // As json::get<double>(): integers converted, floats read (strtod and from_chars both round
  // correctly). False for what from_chars calls out of range; nlohmann may still take an
  // underflow, so the DOM path decides.
  bool ToDouble(double* out) const {
    if (kind == kUnsigned) {
      *out = static_cast<double>(unsigned_value);
    } else if (kind == kSigned) {
      *out = static_cast<double>(signed_value);
    } else {
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *out);
      if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(*out)) {
        return false;
      }
    }
    return true;
  }
};

// A cursor over the JSON part. Every method returns false on what it does not handle.
class JsonCursor {
 public:
  explicit JsonCursor(std::string_view text) : at_(text.data()), end_(text.data() + text.size()) {}

  void SkipBlanks() {
    while (at_ < end_ && (*at_ == ' ' || *at_ == '\n' || *at_ == '\r' || *at_ == '\t')) ++at_;
  }
  bool Take(char c) {
    SkipBlanks();
    if (at_ == end_ || *at_ != c) return false;
    ++at_;
    return true;
  }
  bool Peek(char c) {
    SkipBlanks();
    return at_ < end_ && *at_ == c;
  }
  bool AtEnd() {
    SkipBlanks();
    return at_ == end_;
  }
  size_t Left() const { return static_cast<size_t>(end_ - at_); }
  const char* position() const { return at_; }
  void Seek(const char* position) { at_ = position; }

  // '[' or '{' one level deeper, within the DOM path's nesting bound (JsonNestingWithin).
  bool Open(char c) {
    if (!Take(c)) return false;
    return ++depth_ <= kMaxV2JsonDepth;
  }
  bool Close(char c) {
    if (!Take(c)) return false;
    --depth_;
    return true;
  }
  int depth() const { return depth_; }
  void set_depth(int depth) { depth_ = depth; }

  // A string of ASCII without escapes or control characters.
  bool String(std::string_view* out) {
    if (!Take('"')) return false;
    const char* start = at_;
    while (at_ < end_ && *at_ != '"') {
      const unsigned char c = static_cast<unsigned char>(*at_);
      if (c < 0x20 || c >= 0x80 || c == '\\') return false;
      ++at_;
    }
    if (at_ == end_) return false;
    *out = std::string_view(start, static_cast<size_t>(at_ - start));
    ++at_;
    return true;
  }
  bool Key(std::string_view* out) { return String(out) && Take(':'); }

  bool Literal(std::string_view word) {
    SkipBlanks();
    if (static_cast<size_t>(end_ - at_) < word.size() ||
        std::memcmp(at_, word.data(), word.size()) != 0) {
      return false;
    }
    at_ += word.size();
    return true;
  }
  bool Boolean(bool* out) {
    if (Literal("true")) {
      *out = true;
      return true;
    }
    *out = false;
    return Literal("false");
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, typed as JsonNumber says. An integer past 64
  // bits, which nlohmann reads as a float, is left to the DOM path.
  bool Numeric(JsonNumber* out) {
    SkipBlanks();
    const char* start = at_;
    const bool negative = at_ < end_ && *at_ == '-';
    if (negative) ++at_;
    const char* digits = at_;
    while (at_ < end_ && IsDigit(*at_)) ++at_;
    const size_t count = static_cast<size_t>(at_ - digits);
    if (count == 0 || (count > 1 && *digits == '0')) return false;
    bool integer = true;
    if (at_ < end_ && *at_ == '.') {
      integer = false;
      const char* fraction = ++at_;
      while (at_ < end_ && IsDigit(*at_)) ++at_;
      if (at_ == fraction) return false;
    }
    if (at_ < end_ && (*at_ == 'e' || *at_ == 'E')) {
      integer = false;
      ++at_;
      if (at_ < end_ && (*at_ == '+' || *at_ == '-')) ++at_;
      const char* exponent = at_;
      while (at_ < end_ && IsDigit(*at_)) ++at_;
      if (at_ == exponent) return false;
    }
    out->text = std::string_view(start, static_cast<size_t>(at_ - start));
    if (!integer) {
      out->kind = JsonNumber::kFloat;
      return true;
    }
    if (negative) {
      out->kind = JsonNumber::kSigned;
      return std::from_chars(start, at_, out->signed_value).ec == std::errc();
    }
    out->kind = JsonNumber::kUnsigned;
    return std::from_chars(digits, at_, out->unsigned_value).ec == std::errc();
  }

  // Any JSON value the DOM path would read (and ignore), within the nesting bound.
  bool SkipValue() {
    SkipBlanks();
    if (at_ == end_) return false;
    std::string_view text;
    JsonNumber number;
    double unused;
    switch (*at_) {
      case '"':
        return String(&text);
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      case '[':
        if (!Open('[')) return false;
        if (Close(']')) return true;
        do {
          if (!SkipValue()) return false;
        } while (Take(','));
        return Close(']');
      case '{':
        if (!Open('{')) return false;
        if (Close('}')) return true;
        do {
          if (!Key(&text) || !SkipValue()) return false;
        } while (Take(','));
        return Close('}');
      default:
        // A float past a double is nlohmann's out_of_range even where the value is ignored.
        return Numeric(&number) && number.ToDouble(&unused);
    }
  }

 private:
  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }

  const char* at_;
  const char* end_;
  int depth_ = 0;
};

}  // namespace torchfarm
