// Floats to and from decimal text (float_text.h).
//
// WriteShortestFloat's integer path, for value = m x 2^e2 (m the 24-bit significand):
//   1. The value's rounding interval, in units of 2^(e2-2): [4m-2, 4m+2], or [4m-1, 4m+2] for a
//      power of two (the float below is closer), endpoints included when m is even (a decimal
//      exactly halfway reads back as the even neighbour).
//   2. Scaled by 10^k so the interval's integers have ten or eleven digits, exactly, in 128 bits:
//      [lo, hi] are the integers within it, V/2^s the value itself.
//   3. Shortest: strip trailing decimal digits while a multiple of the next power of ten is still
//      in [lo, hi]; of the candidates left, the nearest to the value (ties to even), which is
//      std::to_chars' rule.
//   4. Fixed or scientific by length, fixed on a tie, as printf would write either.
// Magnitudes of 2^24 and up are left to std::to_chars: there a float's spacing passes 1, and the
// fixed form's trailing digits are the library's choice, not the shortest digits'.
#include "common/float_text.h"

#include <charconv>
#include <cstring>

namespace torchfarm {
namespace {

using u128 = unsigned __int128;

constexpr uint64_t kPow10[] = {1ULL,
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

constexpr double kExactPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                  1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                  1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

constexpr char kDigitPairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

// The integer path's exponents: 2^-37 <= value < 2^24.
constexpr int kLowestE2 = -60;
constexpr int kHighestE2 = 0;

// Digits of v (v < 10^19): log10 from the bit length (1233 / 4096 ~ log10 2), then one check.
int DecimalLength(uint64_t v) {
  const int bits = 64 - __builtin_clzll(v | 1);
  const int guess = bits * 1233 >> 12;
  return guess + (v >= kPow10[guess] ? 1 : 0);
}

// Writes the n digits of v (no leading zeros; n = DecimalLength(v)) at out.
void WriteDigits(uint64_t v, int n, char* out) {
  char* p = out + n;
  while (v >= 100) {
    const uint64_t pair = v % 100;
    v /= 100;
    p -= 2;
    std::memcpy(p, kDigitPairs + 2 * pair, 2);
  }
  if (v >= 10) {
    p -= 2;
    std::memcpy(p, kDigitPairs + 2 * v, 2);
  } else {
    *--p = static_cast<char>('0' + v);
  }
}

// digits x 10^q as printf would write it in %f or %e with exactly those digits, whichever is
// shorter (%f on a tie).
char* Format(char* out, uint64_t digits, int q) {
  const int n = DecimalLength(digits);
  const int x = q + n - 1;  // the scientific exponent
  const int ax = x < 0 ? -x : x;
  const int scientific = n + (n > 1 ? 1 : 0) + 2 + (ax >= 100 ? 3 : 2);
  const int fixed = q >= 0 ? n + q : (n + q > 0 ? n + 1 : 2 - q);
  if (fixed <= scientific) {
    if (q >= 0) {
      WriteDigits(digits, n, out);
      std::memset(out + n, '0', static_cast<size_t>(q));
      return out + n + q;
    }
    if (n + q > 0) {  // ddd.ddd
      const int whole = n + q;
      char buffer[24];
      WriteDigits(digits, n, buffer);
      std::memcpy(out, buffer, static_cast<size_t>(whole));
      out[whole] = '.';
      std::memcpy(out + whole + 1, buffer + whole, static_cast<size_t>(n - whole));
      return out + n + 1;
    }
    // 0.000ddd: fewer than 8 zeros, or %e would have been shorter; the caller's room holds 8.
    std::memcpy(out, "0.00000000", 10);
    WriteDigits(digits, n, out + 2 - q - n);
    return out + 2 - q;
  }
  char buffer[24];
  WriteDigits(digits, n, buffer);
  *out++ = buffer[0];
  if (n > 1) {
    *out++ = '.';
    std::memcpy(out, buffer + 1, static_cast<size_t>(n - 1));
    out += n - 1;
  }
  *out++ = 'e';
  *out++ = x < 0 ? '-' : '+';
  if (ax >= 100) {
    *out++ = static_cast<char>('0' + ax / 100);
    std::memcpy(out, kDigitPairs + 2 * (ax % 100), 2);
  } else {
    std::memcpy(out, kDigitPairs + 2 * ax, 2);
  }
  return out + 2;
}

}  // namespace

char* WriteShortestFloat(char* first, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const int biased = static_cast<int>((bits >> 23) & 0xff);
  const uint32_t fraction = bits & 0x7fffff;
  const int e2 = biased - 150;
  if (biased == 0 || e2 < kLowestE2 || e2 > kHighestE2) {
    return std::to_chars(first, first + kMaxShortestFloatChars, value).ptr;
  }
  char* out = first;
  if (bits >> 31) *out++ = '-';
  const uint64_t m = fraction | (1u << 23);
  const bool inclusive = (m & 1) == 0;
  const uint64_t lower = fraction == 0 && biased > 1 ? 4 * m - 1 : 4 * m - 2;
  const uint64_t upper = 4 * m + 2;

  // value x 10^k in [10^9, 10^10.4): log10(2^(e2+23)) rounded down by the usual 78913 / 2^18.
  const int k = 9 - ((e2 + 23) * 78913 >> 18);
  // k is 3..21 here; 10^20 and 10^21 pass 64 bits.
  const u128 pow10k =
      k <= 19 ? static_cast<u128>(kPow10[k]) : static_cast<u128>(kPow10[19]) * kPow10[k - 19];
  const int s = 2 - e2;  // 2..62: the scaled values are N / 2^s
  const u128 mask = (static_cast<u128>(1) << s) - 1;
  const u128 n_lower = lower * pow10k;
  const u128 n_upper = upper * pow10k;
  const u128 n_value = 4 * m * pow10k;
  uint64_t hi = static_cast<uint64_t>(n_upper >> s);
  if (!inclusive && (n_upper & mask) == 0) --hi;
  uint64_t lo = static_cast<uint64_t>(n_lower >> s);
  if ((n_lower & mask) != 0 || !inclusive) ++lo;  // ceiling, or past an excluded endpoint

  int j = 0;
  while (true) {
    const uint64_t hi_next = hi / 10;
    const uint64_t lo_next = (lo + 9) / 10;
    if (lo_next > hi_next) break;
    hi = hi_next;
    lo = lo_next;
    ++j;
  }
  // The candidate nearest the value, ties to even. The value is (whole + part / 2^s) at scale
  // 10^-k: digits = whole / 10^j, and the rest (rest + part / 2^s) compared with 10^j / 2.
  const uint64_t whole = static_cast<uint64_t>(n_value >> s);
  const uint64_t part = static_cast<uint64_t>(n_value & mask);
  const uint64_t unit = kPow10[j];
  uint64_t digits = whole / unit;
  const uint64_t twice_rest = 2 * (whole % unit);
  const uint64_t half_part = uint64_t{1} << (s - 1);  // part / 2^s = 1/2
  bool up;
  if (twice_rest > unit) {
    up = true;
  } else if (twice_rest + 1 < unit) {
    up = false;
  } else if (twice_rest + 1 == unit) {  // half is (rest + 1/2): compare part with 2^s / 2
    up = part > half_part || (part == half_part && (digits & 1));
  } else {  // twice_rest == unit: at half, and past it by any part
    up = part > 0 || (digits & 1);
  }
  if (up) ++digits;
  if (digits < lo) digits = lo;
  if (digits > hi) digits = hi;
  return Format(out, digits, j - k);
}

namespace {

// digits x 10^exponent for |exponent| <= 22 (the powers a double holds exactly): one rounding
// when digits < 2^53, two otherwise.
double Scaled(uint64_t digits, int exponent) {
  const double value = static_cast<double>(digits);
  return exponent >= 0 ? value * kExactPow10[exponent] : value / kExactPow10[-exponent];
}

}  // namespace

bool DecimalToDouble(uint64_t digits, int exponent, bool negative, double* out) {
  if (digits > (1ULL << 53) || exponent < -22 || exponent > 22) return false;
  const double value = Scaled(digits, exponent);
  *out = negative ? -value : value;
  return true;
}

bool DecimalToFloat(uint64_t digits, int exponent, bool negative, double* as_double) {
  if (DecimalToDouble(digits, exponent, negative, as_double)) return true;
  if (exponent < -22 || exponent > 22) return false;
  // Two roundings (digits to double, then the product or quotient): within 2^-52 of the value,
  // i.e. two of its ulps. A boundary between two floats is a double whose low 29 significand bits
  // are exactly 2^28; anywhere further than 4 ulps from one, both this double and the correctly
  // rounded one fall between the same two boundaries.
  const double value = Scaled(digits, exponent);
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const int64_t low = static_cast<int64_t>(bits & ((1ULL << 29) - 1)) - (1LL << 28);
  if (low >= -4 && low <= 4) return false;
  *as_double = negative ? -value : value;
  return true;
}

}  // namespace torchfarm
