// float_text: WriteShortestFloat against std::to_chars character for character, and
// DecimalToDouble / DecimalToFloat against std::from_chars bit for bit: whole binades, both
// edges of the integer path, the library's own corner values, and seeded random values (the seed is
// printed on a failure).
#include "common/float_text.h"

#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>

namespace torchfarm {
namespace {

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

std::string Ours(float value) {
  char text[kMaxShortestFloatChars];
  return std::string(text, WriteShortestFloat(text, value));
}

std::string Library(float value) {
  char text[64];
  return std::string(text, std::to_chars(text, text + sizeof(text), value).ptr);
}

// Every `stride`th float from `first` up to (not including) `last`, by bit pattern; false at the
// first one whose text differs.
::testing::AssertionResult SameTextFor(uint32_t first, uint32_t last, uint32_t stride = 1) {
  for (uint64_t bits = first; bits < last; bits += stride) {
    const float value = FromBits(static_cast<uint32_t>(bits));
    if (!std::isfinite(value)) continue;
    const std::string ours = Ours(value);
    const std::string library = Library(value);
    if (ours != library) {
      char hex[16];
      std::snprintf(hex, sizeof(hex), "%08x", static_cast<uint32_t>(bits));
      return ::testing::AssertionFailure()
             << "bits " << hex << ": ours " << ours << ", std::to_chars " << library;
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(FloatTextTest, WholeBinadesMatchToCharsForBothSigns) {
  // Every 3rd of [0.5, 1); every 5th of (-2, -1], [1024, 2048) and [2^-20, 2^-19) (fixed and
  // scientific forms). All 2^32 agreed once, checked by a throwaway program.
  EXPECT_TRUE(SameTextFor(126u << 23, 127u << 23, 3));
  for (uint32_t first : {0x80000000u | (127u << 23), 137u << 23, 107u << 23}) {
    EXPECT_TRUE(SameTextFor(first, first + (1u << 23), 5));
  }
}

TEST(FloatTextTest, BothSidesOfTheSwitchTo128BitsMatchToChars) {
  // Values from 2^-10 (q = -33) take 64-bit arithmetic, those under it 128 bits: every 7th float
  // of the two binades either side, where a product past 64 bits would first show.
  for (uint32_t exponent : {115u, 116u, 117u, 118u}) {
    EXPECT_TRUE(SameTextFor(exponent << 23, (exponent + 1) << 23, 7)) << "exponent " << exponent;
  }
}

TEST(FloatTextTest, EveryEdgeOfTheIntegerPathMatchesToChars) {
  // The first and last 4,096 floats of every binade from below the path's lowest (2^-37) to above
  // its highest (2^24), where the interval's lower half shrinks and the scale k steps.
  for (uint32_t exponent = 80; exponent <= 160; ++exponent) {
    const uint32_t first = exponent << 23;
    EXPECT_TRUE(SameTextFor(first, first + 4096)) << "exponent " << exponent;
    EXPECT_TRUE(SameTextFor(first + (1u << 23) - 4096, first + (1u << 23)))
        << "exponent " << exponent;
  }
  // Left to std::to_chars: subnormals, the smallest and largest, integers past 2^24.
  for (float value : {std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                      std::numeric_limits<float>::max(), 16777216.0f, 16777218.0f, 1e10f, 3e38f,
                      -1e-30f, 1e-45f}) {
    EXPECT_EQ(Ours(value), Library(value)) << value;
  }
  // Values people write: the texts themselves.
  EXPECT_EQ(Ours(0.1f), "0.1");
  EXPECT_EQ(Ours(1.0f), "1");
  EXPECT_EQ(Ours(-2.5f), "-2.5");
  EXPECT_EQ(Ours(1e7f), "1e+07");
  EXPECT_EQ(Ours(1234567.0f), "1234567");
  EXPECT_EQ(Ours(0.001f), "0.001");  // as long as "1e-03": fixed wins the tie
  EXPECT_EQ(Ours(0.0001f), "1e-04");
  EXPECT_EQ(Ours(3.4028235e38f), "3.4028235e+38");
  EXPECT_EQ(Ours(0.3f), "0.3");
  EXPECT_EQ(Ours(1.1754944e-38f), "1.1754944e-38");
}

TEST(FloatTextTest, RandomFloatsMatchToChars) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 random(seed);
  for (int i = 0; i < 1'000'000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(random());
    ASSERT_TRUE(SameTextFor(bits, bits + 1));
  }
}

double Read(const std::string& text) {
  double value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

std::string Decimal(uint64_t digits, int exponent, bool negative) {
  return (negative ? "-" : "") + std::to_string(digits) + "e" + std::to_string(exponent);
}

TEST(FloatTextTest, DecimalToDoubleIsFromCharsWhereItAnswers) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 random(seed);
  int answered = 0;
  for (int i = 0; i < 200'000; ++i) {
    const uint64_t digits = random() >> (random() % 64);
    const int exponent = static_cast<int>(random() % 61) - 30;
    const bool negative = random() & 1;
    double ours = 0;
    if (!DecimalToDouble(digits, exponent, negative, &ours)) {
      ASSERT_TRUE(digits > (uint64_t{1} << 53) || exponent < -22 || exponent > 22)
          << Decimal(digits, exponent, negative);
      continue;
    }
    ++answered;
    const double library = Read(Decimal(digits, exponent, negative));
    ASSERT_EQ(std::memcmp(&ours, &library, sizeof(double)), 0)
        << Decimal(digits, exponent, negative) << ": " << ours << " vs " << library;
  }
  EXPECT_GT(answered, 50'000);
  double zero = 1;
  ASSERT_TRUE(DecimalToDouble(0, 0, true, &zero));
  EXPECT_TRUE(zero == 0 && std::signbit(zero));
}

// The float a cast of from_chars' double gives, and whether that double is past the float's
// overflow threshold (half an ulp above the largest float).
struct FloatView {
  float value;
  bool overflows;
};
FloatView ViewOf(double value) {
  const double threshold = 3.4028235677973366e38;
  const bool overflows = std::fabs(value) >= threshold;
  return {overflows ? 0.0f : static_cast<float>(value), overflows};
}

void ExpectSameFloat(uint64_t digits, int exponent, bool negative, int* answered) {
  double ours = 0;
  if (!DecimalToFloat(digits, exponent, negative, &ours)) return;
  ++*answered;
  const FloatView a = ViewOf(ours);
  const FloatView b = ViewOf(Read(Decimal(digits, exponent, negative)));
  ASSERT_EQ(a.overflows, b.overflows) << Decimal(digits, exponent, negative);
  ASSERT_EQ(std::memcmp(&a.value, &b.value, sizeof(float)), 0)
      << Decimal(digits, exponent, negative) << ": " << a.value << " vs " << b.value;
}

TEST(FloatTextTest, DecimalToFloatIsTheCastOfFromCharsEvenBesideATie) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 random(seed);
  int answered = 0;
  // 19-digit decimals over the whole exponent range it answers for.
  for (int i = 0; i < 200'000; ++i) {
    const uint64_t digits = random() % 10'000'000'000'000'000'000ULL;
    ExpectSameFloat(digits, static_cast<int>(random() % 45) - 22, random() & 1, &answered);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(answered, 190'000);
  // Decimals within a few units of the 19th digit of a boundary between two floats (and of the
  // overflow threshold): the one place where reading to a double first matters. The correctly
  // rounded double may be the boundary itself, which a cast takes to the even float.
  int refused = 0;
  for (int i = 0; i < 20'000; ++i) {
    const int binade = static_cast<int>(random() % 100) - 50;
    const uint32_t mantissa = static_cast<uint32_t>(random() % (1u << 23));
    const double boundary =
        i == 0 ? 3.4028235677973366e38
               : std::ldexp(1.0 + (mantissa + 0.5) / static_cast<double>(1u << 23), binade);
    char text[64];
    std::snprintf(text, sizeof(text), "%.18e", boundary);  // 19 significant digits
    std::string s(text);
    const size_t e = s.find('e');
    uint64_t digits = std::stoull(s.substr(0, 1) + s.substr(2, e - 2));
    const int exponent = std::stoi(s.substr(e + 1)) - 18;
    if (exponent < -22 || exponent > 22) continue;
    for (int delta = -3; delta <= 3; ++delta) {
      const int before = answered;
      ExpectSameFloat(digits + delta, exponent, false, &answered);
      if (HasFatalFailure()) return;
      refused += answered == before;
    }
  }
  EXPECT_GT(refused, 0) << "no decimal came near enough to a boundary to be refused";
}

}  // namespace
}  // namespace torchfarm
