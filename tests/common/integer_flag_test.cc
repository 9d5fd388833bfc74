// Integer command-line flags (common/integer_flag.h) through CLI11 itself: at and beyond their
// bounds, and at the widths where a value would wrap into its type.
#include "common/integer_flag.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torchfarm {
namespace {

using ::testing::HasSubstr;

// Parses `--n VALUE` into an int flag ranged min..max; returns CLI11's refusal, "" when taken.
std::string Parse(const std::string& value, int64_t min, int64_t max, int* out) {
  CLI::App app;
  app.add_option("--n", *out)->check(IntegerIn(min, max));
  std::vector<std::string> args = {value, "--n"};  // CLI11 reads them back to front
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(IntegerFlagTest, AtTheBoundsTheValueIsTaken) {
  int n = -7;
  EXPECT_EQ(Parse("0", 0, 1024, &n), "");
  EXPECT_EQ(n, 0);
  EXPECT_EQ(Parse("1024", 0, 1024, &n), "");
  EXPECT_EQ(n, 1024);
  EXPECT_EQ(Parse("2147483647", 0, INT32_MAX, &n), "");
  EXPECT_EQ(n, INT32_MAX);
}

TEST(IntegerFlagTest, BeyondTheBoundsTheFlagRangeAndValueAreNamed) {
  for (const std::string& value : {"-1", "1025", "2147483648", "4294967296", "9223372036854775807",
                                   "18446744073709551615", "1.5", "1e3", "0x10", "", "ten"}) {
    int n = 5;
    const std::string error = Parse(value, 0, 1024, &n);
    EXPECT_THAT(error, HasSubstr("--n: expected an integer in 0..1024, got '" + value + "'"))
        << value;
    EXPECT_EQ(n, 5) << "a refused value leaves the flag alone";
  }
}

}  // namespace
}  // namespace torchfarm
