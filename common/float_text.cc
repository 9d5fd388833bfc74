// Floats from decimal text where a double does not hold the digits (float_text.h); the rest of
// float_text is inline in the header.
#include "common/float_text.h"

#include <cstring>

namespace torchfarm {
namespace float_text_detail {

bool DecimalToFloatTwoRoundings(uint64_t digits, int exponent, bool negative, double* as_double) {
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

}  // namespace float_text_detail
}  // namespace torchfarm
