// Floats to and from decimal text, fast where tensors' numbers usually are, exact everywhere
// (issue 36: a v2 request with 256 JSON numbers spent ~560 instructions a number in
// std::from_chars, std::to_chars and the text around them).
//
// Owns two promises, each checked against the standard library:
//   - WriteShortestFloat writes exactly the characters std::to_chars(first, last, value) writes for
//     a float (the shortest decimal that reads back as the value, fixed or scientific, whichever
//     is shorter, fixed on a tie). Values of magnitude 2^-37..2^24 (about 7e-12..1.7e7) take an
//     integer path of ~130 instructions (~9 ns here, std::to_chars ~16 ns); others go to
//     std::to_chars. All 2^32 floats were compared once (a throwaway program); the tests cover
//     whole binades, every path's edges and random values.
//   - DecimalToDouble / DecimalToFloat turn a decimal already split into digits and a power of ten
//     (what a number scanner collects on its way through the text) into the double std::from_chars
//     would read, and the float a cast of that double gives. They answer only where that is cheap
//     and certain, and return false otherwise, leaving the caller to from_chars: so a caller's
//     result never depends on which path ran.
// Header with no dependencies beyond the standard library; any thread. Inline, because the callers
// call them once a number in a loop (v2_json_data.cc, json_cursor.h): inlined there, the writer
// saves its registers once a tensor, not once a number.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstring>

namespace torchfarm {

// Room for any float WriteShortestFloat writes: at most 15 characters ("-1.23456789e-38"), and
// the path stores whole registers, so it may write up to 32 bytes from `first` as scratch.
inline constexpr int kMaxShortestFloatChars = 32;

// WriteShortestFloat's integer path, for value = c x 2^q (c the 24-bit significand), is
// Giulietti's Schubfach idea worked in exact integers:
//   1. The value's rounding interval, in units of 2^(q-2): [4c-2, 4c+2], or [4c-1, 4c+2] for a
//      power of two (the float below is closer), endpoints included when c is even (a decimal
//      exactly halfway reads back as the even neighbour).
//   2. A power of ten 10^k chosen so the interval is 1 to 10 units of 10^k wide: it then holds at
//      least one integer and at most one multiple of ten. Scaled by 10^-k, exactly, in 64 or 128
//      bits: [lo, hi] are the integers within it, s the value's integer part.
//   3. Shortest: if a multiple of ten (s rounded down or up to one) is inside, it is the only
//      decimal of fewer digits there, so it is the answer, trailing zeros dropped. Otherwise the
//      answer has s's length: s or s + 1, whichever is inside and nearer the value (ties to
//      even), which is std::to_chars' rule.
//   4. Fixed or scientific by length, fixed on a tie, as printf would write either; the digits
//      are written eight at a time in one register.
// Magnitudes of 2^24 and up are left to std::to_chars: there a float's spacing passes 1, and the
// fixed form's trailing digits are the library's choice, not the shortest digits'. So are those
// under 2^-37, where 10^-k passes 64 bits.

namespace float_text_detail {

using u128 = unsigned __int128;

inline constexpr uint64_t kPow10[] = {1ULL,
                                      10ULL,
                                      100ULL,
                                      1000ULL,
                                      10000ULL,
                                      100000ULL,
                                      1000000ULL,
                                      10000000ULL,
                                      100000000ULL,
                                      1000000000ULL,
                                      10000000000ULL,
                                      100000000000ULL,
                                      1000000000000ULL,
                                      10000000000000ULL,
                                      100000000000000ULL,
                                      1000000000000000ULL,
                                      10000000000000000ULL,
                                      100000000000000000ULL,
                                      1000000000000000000ULL,
                                      10000000000000000000ULL};

inline constexpr char kDigitPairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

// The integer path's exponents: 2^-37 <= value < 2^24.
inline constexpr int kLowestE2 = -60;
inline constexpr int kHighestE2 = 0;

// Digits of v (v < 10^19): log10 from the bit length (1233 / 4096 ~ log10 2), then one check.
inline int DecimalLength(uint64_t v) {
  const int bits = 64 - __builtin_clzll(v | 1);
  const int guess = bits * 1233 >> 12;
  return guess + (v >= kPow10[guess] ? 1 : 0);
}

// The eight decimal digits of v < 10^8, leading zeros included, as ASCII in memory order (the
// first digit in the lowest byte). Each step splits every lane of the register in two: halves of
// four digits in 32-bit lanes, pairs in 16-bit lanes, digits in bytes; a lane's quotient by 100
// or 10 is a multiply and a shift, exact for the lane's range.
inline uint64_t EightDigitsAscii(uint32_t v) {
  const uint64_t halves = (v / 10000) | (static_cast<uint64_t>(v % 10000) << 32);
  const uint64_t hundreds = ((halves * 10486) >> 20) & 0x0000007F0000007FULL;
  const uint64_t pairs = hundreds | ((halves - hundreds * 100) << 16);
  const uint64_t tens = ((pairs * 103) >> 10) & 0x000F000F000F000FULL;
  const uint64_t digits = tens | ((pairs - tens * 10) << 8);
  return digits + 0x3030303030303030ULL;
}

// Writes the n digits of v (no leading zeros; n = DecimalLength(v) <= 9) at out, and may write
// up to 16 bytes from out as scratch.
inline void WriteDigits(uint32_t v, int n, char* out) {
  if (n == 9) {
    *out++ = static_cast<char>('0' + v / 100000000);
    v %= 100000000;
    n = 8;
  }
  // The last n of the eight digits, moved to the lowest bytes.
  const uint64_t ascii = EightDigitsAscii(v) >> (8 * (8 - n));
  std::memcpy(out, &ascii, sizeof(ascii));
}

// digits x 10^q as printf would write it in %f or %e with exactly those digits, whichever is
// shorter (%f on a tie). digits < 10^9 and the value is in the integer path's range, so %e's
// exponent has two digits: %e is n + (n > 1) + 4 characters long, which decides each case below.
// out has room for 32 bytes of scratch.
__attribute__((always_inline)) inline char* Format(char* out, uint32_t digits, int q) {
  const int n = DecimalLength(digits);
  const int point = n > 1 ? 1 : 0;  // %e's decimal point
  char buffer[32];  // the digits, then scratch that the fixed-size copies below read
  WriteDigits(digits, n, buffer);
  if (q >= 0) {
    if (q <= 4 + point) {  // ddd000 (n + q figures), at most 8 below 2^24
      std::memcpy(out, buffer, 16);
      std::memcpy(out + n, "00000000", 8);
      return out + n + q;
    }
  } else if (n + q > 0) {  // ddd.ddd (n + 1), always shorter: the digits, the fraction one byte on
    const int whole = n + q;
    std::memcpy(out, buffer, 16);
    std::memcpy(out + whole + 1, buffer + whole, 16);
    out[whole] = '.';
    return out + n + 1;
  } else if (-q <= n + 2 + point) {  // 0.000ddd (2 - q): fewer than 8 zeros
    std::memcpy(out, "0.00000000", 10);
    std::memcpy(out + 2 - q - n, buffer, 16);
    return out + 2 - q;
  }
  const int x = q + n - 1;  // the scientific exponent, |x| < 100
  const int ax = x < 0 ? -x : x;
  *out++ = buffer[0];
  if (n > 1) {
    *out++ = '.';
    std::memcpy(out, buffer + 1, 16);
    out += n - 1;
  }
  *out++ = 'e';
  *out++ = x < 0 ? '-' : '+';
  std::memcpy(out, kDigitPairs + 2 * ax, 2);
  return out + 2;
}

// The shortest digits for c x 2^q (steps 1-3 above), as digits x 10^*k. Wide holds the scaled
// interval, (4c + 2) x 10^-k < 2^26 x 10^-k: 64 bits while 10^-k <= 10^11 (q >= -33, the
// irregular case's extra power of ten included; values from about 0.001), 128 below.
template <typename Wide>
__attribute__((always_inline)) inline uint32_t ShortestDigits(uint64_t c, int q, bool irregular,
                                                              int* k_out) {
  const bool inclusive = (c & 1) == 0;
  // 10^k <= the interval's width (2^q, or 3/4 of it for a power of two) < 10^(k+1); k <= 0 here,
  // so the scaled values are N / 2^shift with N = (units of 2^(q-2)) x 10^-k.
  const int shift = 2 - q;  // 2..62
  int k = q * 78913 >> 18;  // floor(q log10 2), -19..0
  uint64_t pow10 = kPow10[-k];
  if (irregular && 3 * static_cast<u128>(pow10) < (static_cast<u128>(1) << shift)) {
    --k;  // three quarters of 2^q fell under 10^k (never past 10^19: pow10 < 2^62 / 3 here)
    pow10 *= 10;
  }
  const Wide one = 1;
  const Wide mask = (one << shift) - 1;
  const Wide n_value = static_cast<Wide>(4 * c) * pow10;
  const Wide n_lower = n_value - (irregular ? 1 : 2) * static_cast<Wide>(pow10);
  const Wide n_upper = n_value + 2 * static_cast<Wide>(pow10);
  uint64_t hi = static_cast<uint64_t>(n_upper >> shift);
  if (!inclusive && (n_upper & mask) == 0) --hi;
  uint64_t lo = static_cast<uint64_t>(n_lower >> shift);
  if ((n_lower & mask) != 0 || !inclusive) ++lo;  // ceiling, or past an excluded endpoint
  const uint64_t s = static_cast<uint64_t>(n_value >> shift);  // < 2^28

  const uint64_t ten_below = s / 10 * 10;  // the multiples of ten either side of s
  if (ten_below >= lo || ten_below + 10 <= hi) {
    uint64_t digits = ten_below >= lo ? ten_below : ten_below + 10;
    do {
      digits /= 10;
      ++k;
    } while (digits % 10 == 0);
    *k_out = k;
    return static_cast<uint32_t>(digits);
  }
  // s or s + 1, the nearer inside; the value is s + part / 2^shift, half is 2^(shift-1).
  const uint64_t part = static_cast<uint64_t>(n_value & mask);
  const uint64_t half = uint64_t{1} << (shift - 1);
  const bool up = s + 1 <= hi && (s < lo || part > half || (part == half && (s & 1)));
  *k_out = k;
  return static_cast<uint32_t>(up ? s + 1 : s);
}

}  // namespace float_text_detail

// 10^n for n in 0..19, every power of ten a uint64_t holds (the digit scanners' scales too).
constexpr uint64_t Pow10(int n) { return float_text_detail::kPow10[n]; }

// Writes `value` (finite, not needed to be normal) at `first`, which has room for
// kMaxShortestFloatChars; returns the end. Exactly std::to_chars(first, last, value)'s text.
__attribute__((always_inline)) inline char* WriteShortestFloat(char* first, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const int biased = static_cast<int>((bits >> 23) & 0xff);
  const uint32_t fraction = bits & 0x7fffff;
  const int q = biased - 150;
  if (biased == 0 || q < float_text_detail::kLowestE2 || q > float_text_detail::kHighestE2) {
    return std::to_chars(first, first + kMaxShortestFloatChars, value).ptr;
  }
  char* out = first;
  if (bits >> 31) *out++ = '-';
  const uint64_t c = fraction | (1u << 23);
  const bool irregular = fraction == 0 && biased > 1;
  int k;
  const uint32_t digits =
      q >= -33 ? float_text_detail::ShortestDigits<uint64_t>(c, q, irregular, &k)
               : float_text_detail::ShortestDigits<float_text_detail::u128>(c, q, irregular, &k);
  return float_text_detail::Format(out, digits, k);
}

namespace float_text_detail {

inline constexpr double kExactPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                         1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                         1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

// digits x 10^exponent for |exponent| <= 22 (the powers a double holds exactly): one rounding
// when digits <= 2^53, two otherwise.
inline double Scaled(uint64_t digits, int exponent) {
  // Through int64 where it fits: one signed conversion instruction, not the unsigned sequence.
  const double value = digits <= (1ULL << 53) ? static_cast<double>(static_cast<int64_t>(digits))
                                              : static_cast<double>(digits);
  return exponent >= 0 ? value * kExactPow10[exponent] : value / kExactPow10[-exponent];
}

// DecimalToFloat where DecimalToDouble did not answer (more digits than a double holds).
bool DecimalToFloatTwoRoundings(uint64_t digits, int exponent, bool negative, double* as_double);

}  // namespace float_text_detail

// The decimal (negative ? -1 : 1) x digits x 10^exponent. `digits` holds every significant digit
// (at most 19 of them, so it never wrapped). True and *out set to the correctly rounded double
// when digits < 2^53 and |exponent| <= 22 (both exact in a double: one rounding), else false.
inline bool DecimalToDouble(uint64_t digits, int exponent, bool negative, double* out) {
  if (digits > (1ULL << 53) || exponent < -22 || exponent > 22) return false;
  const double value = float_text_detail::Scaled(digits, exponent);
  *out = negative ? -value : value;
  return true;
}

// As DecimalToDouble and then a cast to float, i.e. static_cast<float>(the correctly rounded
// double), for any 19-digit `digits` and |exponent| <= 22. *as_double gets a double that rounds to
// the same float as the correctly rounded one and lies on the same side of every float's rounding
// boundary, so a range check against such a boundary (the float's overflow threshold) answers the
// same. False where it cannot promise that (a value within a few double ulps of a boundary between
// two floats), and the caller reads the text exactly instead.
inline bool DecimalToFloat(uint64_t digits, int exponent, bool negative, double* as_double) {
  return DecimalToDouble(digits, exponent, negative, as_double) ||
         float_text_detail::DecimalToFloatTwoRoundings(digits, exponent, negative, as_double);
}

}  // namespace torchfarm
