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

#if defined(__SSE2__) && defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "common/float_text.h"
#include "supervisor/frontend/v2_http_codec.h"

namespace torchfarm {

// A JSON number as nlohmann's lexer types it: without '-' and within uint64, unsigned; with '-'
// and within int64, signed; with a fraction or an exponent, a float (kept as text until needed,
// with its significant digits collected on the way so the common ones convert without a re-read).
struct JsonNumber {
  enum Kind { kUnsigned, kSigned, kFloat } kind = kUnsigned;
  uint64_t unsigned_value = 0;
  int64_t signed_value = 0;
  std::string_view text;
  // The value is (negative ? -1 : 1) x digits x 10^exponent when all_digits (at most 19
  // significant digits); otherwise digits holds the first 19 and the text decides.
  uint64_t digits = 0;
  int exponent = 0;
  bool negative = false;
  bool all_digits = true;

  // An integer 0..max, as GetNonNegative accepts it ("-0" included).
  bool NonNegative(uint64_t max, uint64_t* out) const {
    if (kind == kFloat || (kind == kSigned && signed_value != 0)) return false;
    const uint64_t value = kind == kUnsigned ? unsigned_value : 0;
    if (value > max) return false;
    *out = value;
    return true;
  }
  // As json::get<double>(): integers converted, floats read (strtod and from_chars both round
  // correctly; DecimalToDouble does where it answers). False for what from_chars calls out of
  // range; nlohmann may still take an underflow, so the DOM path decides.
  bool ToDouble(double* out) const {
    if (kind == kUnsigned) {
      *out = static_cast<double>(unsigned_value);
    } else if (kind == kSigned) {
      *out = static_cast<double>(signed_value);
    } else if (!all_digits || !DecimalToDouble(digits, exponent, negative, out)) {
      return ReadText(out);
    }
    return true;
  }
  // For a float32 element: a double that the float cast and the float range check treat exactly as
  // they treat ToDouble's (float_text.h, DecimalToFloat), cheaper for 17-19 digits.
  bool ToDoubleForFloat(double* out) const {
    if (kind == kFloat && all_digits && DecimalToFloat(digits, exponent, negative, out)) {
      return true;
    }
    return ToDouble(out);
  }

 private:
  bool ReadText(double* out) const {
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *out);
    return error == std::errc() && end == text.data() + text.size() && std::isfinite(*out);
  }
};

// A cursor over the JSON part. Every method returns false on what it does not handle.
class JsonCursor {
 public:
  explicit JsonCursor(std::string_view text)
      : begin_(text.data()), at_(text.data()), end_(text.data() + text.size()) {}

  void SkipBlanks() {
    if (at_<end_&& static_cast<unsigned char>(*at_)> ' ') return;  // the usual case: none
    if (end_ - at_ >= 2 && *at_ == ' ' && static_cast<unsigned char>(at_[1]) > ' ') {
      ++at_;  // the next: one space, as after json.dumps' ", " and ": "
      return;
    }
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
    Decimal d;
    const char* start = at_;
    const char* p = ScanDecimal(start, &d);
    if (p == nullptr) return false;
    at_ = p;
    out->negative = d.negative;
    out->text = std::string_view(start, static_cast<size_t>(p - start));
    out->digits = d.digits;
    out->exponent = d.exponent;
    out->all_digits = d.all_digits;
    if (!d.integer) {
      out->kind = JsonNumber::kFloat;
      return true;
    }
    if (d.negative) {
      out->kind = JsonNumber::kSigned;
      if (d.all_digits && d.digits <= static_cast<uint64_t>(INT64_MAX)) {
        out->signed_value = -static_cast<int64_t>(d.digits);
        return true;
      }
      return std::from_chars(start, p, out->signed_value).ec == std::errc();
    }
    out->kind = JsonNumber::kUnsigned;
    if (d.all_digits) {
      out->unsigned_value = d.digits;
      return true;
    }
    return std::from_chars(start, p, out->unsigned_value).ec == std::errc();
  }

  // The usual element of a float32 tensor, a number with a fraction or an exponent and at most 19
  // significant digits, read straight to *as_double: the double Numeric and ToDoubleForFloat would
  // give, when DecimalToFloat answers. False, with the cursor where it was, for anything else (an
  // integer, which JSON types apart; more digits; a value DecimalToFloat leaves to the text; what
  // is no number at all), which the caller reads through Numeric.
  __attribute__((always_inline)) bool DecimalForFloat(double* as_double) {
    SkipBlanks();
    Decimal d;
    const char* p = ScanDecimal(at_, &d);
    if (p == nullptr || d.integer || !d.all_digits ||
        !DecimalToFloat(d.digits, d.exponent, d.negative, as_double)) {
      return false;
    }
    at_ = p;
    return true;
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

  // A JSON number's parts, as ScanDecimal collects them: the value is
  // (negative ? -1 : 1) x digits x 10^exponent when all_digits (at most 19 significant digits).
  struct Decimal {
    uint64_t digits = 0;
    int exponent = 0;
    bool negative = false;
    bool all_digits = true;
    bool integer = true;  // neither a fraction nor an exponent
  };

  // The number at p in JSON's grammar, in one pass (the digits are checked and collected
  // together): the first byte after it, or nullptr where p holds no number.
  __attribute__((always_inline)) const char* ScanDecimal(const char* p, Decimal* d) const {
    d->negative = p < end_ && *p == '-';
    if (d->negative) ++p;
    if (p < end_ &&
        *p == '0') {  // "0", as in most of a tensor's "0.123": no other digit may follow
      if (++p < end_ && IsDigit(*p)) return nullptr;
    } else {
      const char* whole = p;
      p = DigitRun(p, false, &d->digits, &d->exponent, &d->all_digits);
      if (p == whole) return nullptr;
    }
    if (p < end_ && *p == '.') {
      d->integer = false;
      const char* fraction = ++p;
      p = DigitRun(p, true, &d->digits, &d->exponent, &d->all_digits);
      if (p == fraction) return nullptr;
    }
    if (p < end_ && (*p == 'e' || *p == 'E')) {
      d->integer = false;
      ++p;
      const bool minus = p < end_ && *p == '-';
      if (p < end_ && (*p == '+' || *p == '-')) ++p;
      const char* first = p;
      int power = 0;
      while (p < end_ && IsDigit(*p)) {
        if (power < 100000) {
          power = power * 10 + (*p - '0');
        } else {
          d->all_digits = false;  // an exponent past a million: the text decides
        }
        ++p;
      }
      if (p == first) return nullptr;
      d->exponent += minus ? -power : power;
    }
    return p;
  }

  // The digits at p, up to eight at a time, collected into *digits while it stays below 10^19
  // (a fraction's each lower *exponent); one past that is dropped (*all_digits false; a whole
  // part's raises *exponent). Returns the first byte after the run.
  __attribute__((always_inline)) const char* DigitRun(const char* p, bool fraction,
                                                      uint64_t* digits, int* exponent,
                                                      bool* all_digits) const {
    // Below 10^(19-n), n more digits keep the value below 10^19 (Pow10: float_text.h).
    auto room_for = [](int n) { return Pow10(19 - n); };
    uint64_t value = *digits;
    int power = *exponent;
#if defined(__SSE2__) && defined(__x86_64__)
    // Sixteen bytes at a time: a tensor's "0.5118216276168823" is one step. A run shorter than
    // sixteen is read as the sixteen bytes that end with it, so only where those start within the
    // text; elsewhere the eight-byte steps below take it.
    while (end_ - p >= 16) {
      const int n = LeadingDigits16(p);
      if (n == 0) {
        *digits = value;
        *exponent = power;
        return p;
      }
      if (value >= room_for(n) || (n < 16 && static_cast<size_t>(p - begin_) + n < 16)) break;
      value = value * Pow10(n) + DigitsEndingAt(p + n, n);
      if (fraction) power -= n;
      p += n;
      if (n < 16 || (p < end_ && !IsDigit(*p))) {  // the run ended: no further load
        *digits = value;
        *exponent = power;
        return p;
      }
    }
#endif
    while (end_ - p >= 8) {
      uint64_t bytes;
      std::memcpy(&bytes, p, sizeof(bytes));
      const uint64_t other = NonDigitBytes(bytes);
      if (other == 0) {  // eight digits, and maybe more after them
        if (value >= room_for(8)) break;
        value = value * Pow10(8) + EightDigitsValue(bytes - 0x3030303030303030ULL);
        if (fraction) power -= 8;
        p += 8;
        if (p < end_ && !IsDigit(*p)) break;  // the run ended with these eight: no further load
        continue;
      }
      // The run ends inside these eight bytes, after n digits.
      const int n = __builtin_ctzll(other) >> 3;
      if (n > 0) {
        if (value >= room_for(n)) break;
        // The n digits moved to the top of the register: the bytes after them, and any borrow
        // they made, shifted out; the zeros below read as leading zeros.
        value =
            value * Pow10(n) + EightDigitsValue((bytes - 0x3030303030303030ULL) << (8 * (8 - n)));
        if (fraction) power -= n;
        p += n;
      }
      *digits = value;
      *exponent = power;
      return p;
    }
    for (; p < end_ && IsDigit(*p); ++p) {
      if (value < 1000000000000000000ULL) {
        value = value * 10 + static_cast<unsigned>(*p - '0');
        if (fraction) --power;
      } else {
        *all_digits = false;
        if (!fraction) ++power;
      }
    }
    *digits = value;
    *exponent = power;
    return p;
  }

#if defined(__SSE2__) && defined(__x86_64__)
  // How many of the 16 bytes at p (all readable) lead with ASCII digits, 0..16: a byte minus '0'
  // is a digit's value exactly when, unsigned, it is at most 9.
  __attribute__((always_inline)) static int LeadingDigits16(const char* p) {
    const __m128i values =
        _mm_sub_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), _mm_set1_epi8('0'));
    const __m128i digit = _mm_cmpeq_epi8(_mm_min_epu8(values, _mm_set1_epi8(9)), values);
    const unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(digit));
    return __builtin_ctz(~mask);  // bit 16 of ~mask is set: at most 16
  }

  // The value of the n (1..16) digits that end at `end`, from the 16 bytes before `end` (the
  // caller checked they are readable), those before the run masked to zero: digit pairs in 16-bit
  // lanes, fours and eights by multiply-add, the two eights combined.
  __attribute__((always_inline)) static uint64_t DigitsEndingAt(const char* end, int n) {
    alignas(16) static constexpr unsigned char kKeepLast[32] = {
        0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,
        0,    0,    0,    0,    0,    0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    const __m128i keep = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kKeepLast + n));
    const __m128i values =
        _mm_and_si128(_mm_sub_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(end - 16)),
                                   _mm_set1_epi8('0')),
                      keep);
    // Each 16-bit lane holds an earlier digit (low byte) and a later one (high byte).
    const __m128i pairs = _mm_add_epi16(
        _mm_mullo_epi16(_mm_and_si128(values, _mm_set1_epi16(0xff)), _mm_set1_epi16(10)),
        _mm_srli_epi16(values, 8));
    const __m128i fours = _mm_madd_epi16(pairs, _mm_set1_epi32((1 << 16) | 100));
    const __m128i eights =
        _mm_madd_epi16(_mm_packs_epi32(fours, fours), _mm_set1_epi32((1 << 16) | 10000));
    const uint64_t both = static_cast<uint64_t>(_mm_cvtsi128_si64(eights));
    return (both & 0xffffffffULL) * 100000000ULL + (both >> 32);
  }
#endif

  // Of 8 bytes in memory order, a byte non-zero where the byte is not an ASCII digit, zero
  // where it is. SWAR: a digit's high nibble is 3 and adding 6 keeps it 3; a byte's add carries
  // only into later bytes, which a reader of the first non-digit never looks at.
  __attribute__((always_inline)) static uint64_t NonDigitBytes(uint64_t bytes) {
    const uint64_t nibbles = (bytes & 0xF0F0F0F0F0F0F0F0ULL) |
                             (((bytes + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) >> 4);
    return nibbles ^ 0x3333333333333333ULL;
  }

  // The eight-digit number whose digit values (0..9) are the bytes of v, the first in the lowest
  // byte: pairs, fours and the eight combined by multiplication.
  __attribute__((always_inline)) static uint64_t EightDigitsValue(uint64_t v) {
    v = (v * 10) + (v >> 8);
    return (((v & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
            (((v >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >>
           32;
  }

  // The text's first byte: the 16-digit reader may look back to it, not past (unused without SSE2).
  [[maybe_unused]] const char* begin_;
  const char* at_;
  const char* end_;
  int depth_ = 0;
};

}  // namespace torchfarm
