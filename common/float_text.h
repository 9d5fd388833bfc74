// Floats to and from decimal text, fast where tensors' numbers usually are, exact everywhere
// (issue 36: a v2 request with 256 JSON numbers spent ~560 instructions a number in
// std::from_chars, std::to_chars and the text around them).
//
// Owns two promises, each checked against the standard library:
//   - WriteShortestFloat writes exactly the characters std::to_chars(first, last, value) writes for
//     a float (the shortest decimal that reads back as the value, fixed or scientific, whichever
//     is shorter, fixed on a tie). Values of magnitude 2^-37..2^24 (about 7e-12..1.7e7) take an
//     integer path of ~100 instructions; others go to std::to_chars.
//   - DecimalToDouble / DecimalToFloat turn a decimal already split into digits and a power of ten
//     (what a number scanner collects on its way through the text) into the double std::from_chars
//     would read, and the float a cast of that double gives. They answer only where that is cheap
//     and certain, and return false otherwise, leaving the caller to from_chars: so a caller's
//     result never depends on which path ran.
// Header with no dependencies beyond the standard library; any thread. The two readers are inline:
// a scanner calls them once a number.
#pragma once

#include <cstdint>

namespace torchfarm {

// Room for any float WriteShortestFloat writes: at most 15 characters ("-1.23456789e-38"), and
// the path stores whole registers, so it may write up to 32 bytes from `first` as scratch.
inline constexpr int kMaxShortestFloatChars = 32;

// Writes `value` (finite, not needed to be normal) at `first`, which has room for
// kMaxShortestFloatChars; returns the end. Exactly std::to_chars(first, last, value)'s text.
char* WriteShortestFloat(char* first, float value);

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
