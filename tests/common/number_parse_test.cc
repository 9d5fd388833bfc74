// Numbers from outside (common/number_parse.h): at and beyond every bound, and at the widths where
// a value would wrap or be truncated on its way into its type.
#include "common/number_parse.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "common/worker_count.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr int64_t k2To31 = int64_t{1} << 31;
constexpr int64_t k2To32 = int64_t{1} << 32;

TEST(NumberParseTest, JsonIntegersInsideTheRangeAreRead) {
  int64_t v = 0;
  EXPECT_TRUE(IntegerFromJson(json(0), "k", 0, 10, &v).ok());
  EXPECT_EQ(v, 0);
  EXPECT_TRUE(IntegerFromJson(json(10), "k", 0, 10, &v).ok());
  EXPECT_EQ(v, 10);
  EXPECT_TRUE(IntegerFromJson(json(INT64_MAX), "k", 0, INT64_MAX, &v).ok());
  EXPECT_EQ(v, INT64_MAX);
  EXPECT_TRUE(IntegerFromJson(json(uint64_t{INT64_MAX}), "k", 0, INT64_MAX, &v).ok());
  EXPECT_EQ(v, INT64_MAX);
  EXPECT_TRUE(IntegerFromJson(json(INT64_MIN), "k", INT64_MIN, 0, &v).ok());
  EXPECT_EQ(v, INT64_MIN);
}

TEST(NumberParseTest, JsonValuesBeyondTheRangeOrOfAnotherTypeAreRefusedByName) {
  int64_t v = 7;
  EXPECT_EQ(IntegerFromJson(json(11), "config.k", 0, 10, &v).message(),
            "config.k: expected an integer in 0..10, got number 11");
  EXPECT_EQ(IntegerFromJson(json(-1), "config.k", 0, 10, &v).message(),
            "config.k: expected an integer in 0..10, got number -1");
  EXPECT_EQ(IntegerFromJson(json(1.5), "k", 0, 10, &v).message(),
            "k: expected an integer in 0..10, got number 1.5");
  EXPECT_EQ(IntegerFromJson(json("5"), "k", 0, 10, &v).message(),
            "k: expected an integer in 0..10, got string \"5\"");
  EXPECT_EQ(IntegerFromJson(json(true), "k", 0, 10, &v).message(),
            "k: expected an integer in 0..10, got boolean true");
  EXPECT_EQ(IntegerFromJson(json(nullptr), "k", 0, 10, &v).message(),
            "k: expected an integer in 0..10, got null null");
  // Above INT64_MAX the parser keeps an unsigned value: never wrapped to a negative one.
  EXPECT_EQ(IntegerFromJson(json(UINT64_MAX), "k", -1, 10, &v).message(),
            "k: expected an integer in -1..10, got number 18446744073709551615");
  EXPECT_EQ(IntegerFromJson(json(uint64_t{1} << 63), "k", INT64_MIN, INT64_MAX, &v).message(),
            "k: expected an integer in -9223372036854775808..9223372036854775807, got number "
            "9223372036854775808");
  EXPECT_EQ(IntegerFromJson(json::parse("1e3"), "k", 0, 10000, &v).code(),
            StatusCode::kInvalidArgument)
      << "an exponent is a float, not an integer";
  EXPECT_EQ(v, 7) << "a refused value leaves the output alone";
}

TEST(NumberParseTest, NarrowTypesNeverTruncate) {
  int v = 0;
  // A range wider than int is narrowed to int's, and the message says so.
  for (int64_t wide : {k2To31, k2To32, INT64_MAX}) {
    Status s = IntegerFromJson(json(wide), "k", 0, INT64_MAX, &v);
    EXPECT_EQ(s.message(),
              "k: expected an integer in 0..2147483647, got number " + std::to_string(wide));
  }
  EXPECT_TRUE(IntegerFromJson(json(INT32_MAX), "k", 0, INT64_MAX, &v).ok());
  EXPECT_EQ(v, INT32_MAX);
  EXPECT_EQ(IntegerFromJson(json(-k2To31 - 1), "k", INT64_MIN, 0, &v).message(),
            "k: expected an integer in -2147483648..0, got number -2147483649");
  uint64_t u = 0;
  EXPECT_EQ(IntegerFromJson(json(-1), "k", 0, INT64_MAX, &u).message(),
            "k: expected an integer in 0..9223372036854775807, got number -1");
  EXPECT_TRUE(IntegerFromJson(json(INT64_MAX), "k", 0, INT64_MAX, &u).ok());
  EXPECT_EQ(u, uint64_t{INT64_MAX});
  uint16_t small = 0;
  EXPECT_EQ(IntegerFromJson(json(65536), "k", 0, 100000, &small).message(),
            "k: expected an integer in 0..65535, got number 65536");
}

TEST(NumberParseTest, TextIsDecimalDigitsWithAnOptionalMinus) {
  int64_t v = 0;
  EXPECT_TRUE(IntegerFromText("0", "--n", 0, 10, &v).ok());
  EXPECT_TRUE(IntegerFromText("10", "--n", 0, 10, &v).ok());
  EXPECT_EQ(v, 10);
  EXPECT_TRUE(IntegerFromText("-5", "--n", -5, 10, &v).ok());
  EXPECT_EQ(v, -5);
  EXPECT_TRUE(IntegerFromText("9223372036854775807", "--n", 0, INT64_MAX, &v).ok());
  EXPECT_EQ(v, INT64_MAX);
  for (const char* bad :
       {"", "-", "+5", " 5", "5 ", "0x10", "1e3", "1.0", "five", "11", "-1", "2147483648",
        "4294967296", "9223372036854775808", "18446744073709551615", "-9223372036854775809"}) {
    Status s = IntegerFromText(bad, "--n", 0, 10, &v);
    EXPECT_EQ(s.message(), std::string("--n: expected an integer in 0..10, got '") + bad + "'");
  }
  EXPECT_THAT(IntegerFromText(std::string(500, '9'), "--n", 0, 10, &v).message(), HasSubstr("...'"))
      << "a long value is shortened in the message";
}

TEST(WorkerCountTest, OneBoundForEveryPath) {
  EXPECT_TRUE(CheckWorkerCount(0, "scale.count").ok());
  EXPECT_TRUE(CheckWorkerCount(kMaxWorkersPerModel, "scale.count").ok());
  for (int64_t beyond :
       {int64_t{kMaxWorkersPerModel} + 1, k2To31, k2To32, INT64_MAX, int64_t{-1}}) {
    EXPECT_EQ(CheckWorkerCount(beyond, "scale.count").message(),
              "scale.count: expected an integer in 0..1024 (workers of one model), got " +
                  std::to_string(beyond));
  }
}

}  // namespace
}  // namespace torchfarm
