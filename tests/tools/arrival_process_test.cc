// ArrivalProcess (tools/arrival_process.h): the gaps of `torchfarm bench --arrival`. Seeded, so
// the moments below are the same on every run; 200,000 gaps put the sample mean within ~1% and
// the sample CV within a few % of the target for every setting tested.
#include "tools/arrival_process.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

struct Moments {
  double mean = 0, cv = 0, min = 0;
};

Moments Measure(Arrival arrival, double mean_gap_ns, double cv, uint64_t seed, int n = 200'000) {
  ArrivalProcess process(arrival, mean_gap_ns, cv, seed);
  double sum = 0, sum2 = 0, low = 1e300;
  for (int i = 0; i < n; ++i) {
    const double gap = process.NextGapNs();
    sum += gap;
    sum2 += gap * gap;
    low = std::min(low, gap);
  }
  const double mean = sum / n;
  const double variance = sum2 / n - mean * mean;
  return {mean, std::sqrt(std::max(0.0, variance)) / mean, low};
}

TEST(ArrivalProcess, FixedIsEvenlySpaced) {
  ArrivalProcess process(Arrival::kFixed, 500'000, /*cv=*/4, /*seed=*/1);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(process.NextGapNs(), 500'000);
}

TEST(ArrivalProcess, PoissonHasTheRateAndACvOfOne) {
  const Moments m = Measure(Arrival::kPoisson, 1e6, /*cv ignored=*/4, 7);
  EXPECT_NEAR(m.mean, 1e6, 1e6 * 0.01);
  EXPECT_NEAR(m.cv, 1.0, 0.02);
  EXPECT_GE(m.min, 0);
}

class GammaCv : public ::testing::TestWithParam<double> {};

TEST_P(GammaCv, HasTheRateAndTheAskedSpread) {
  const double cv = GetParam();
  const Moments m = Measure(Arrival::kGamma, 250'000, cv, 11);
  EXPECT_NEAR(m.mean, 250'000, 250'000 * (cv > 2 ? 0.05 : 0.01)) << "cv " << cv;
  EXPECT_NEAR(m.cv, cv, cv * (cv > 2 ? 0.1 : 0.03)) << "cv " << cv;
  EXPECT_GE(m.min, 0);
}

// 0.5: smoother than Poisson; 1: Poisson; 4: the bursty load issue 32 measures under.
INSTANTIATE_TEST_SUITE_P(Spreads, GammaCv, ::testing::Values(0.5, 1.0, 2.0, 4.0));

TEST(ArrivalProcess, TheSameSeedGivesTheSameGaps) {
  ArrivalProcess a(Arrival::kGamma, 1e5, 4, 99), b(Arrival::kGamma, 1e5, 4, 99),
      c(Arrival::kGamma, 1e5, 4, 100);
  bool differs = false;
  for (int i = 0; i < 1000; ++i) {
    const double x = a.NextGapNs();
    EXPECT_EQ(x, b.NextGapNs());
    differs |= x != c.NextGapNs();
  }
  EXPECT_TRUE(differs);
}

TEST(ArrivalProcess, NamesParseAndWrongOnesAreRefusedWithWhatWasGiven) {
  Arrival a;
  ASSERT_TRUE(ParseArrival("gamma", &a).ok());
  EXPECT_EQ(a, Arrival::kGamma);
  EXPECT_STREQ(ArrivalName(a), "gamma");
  ASSERT_TRUE(ParseArrival("poisson", &a).ok());
  ASSERT_TRUE(ParseArrival("fixed", &a).ok());
  Status s = ParseArrival("Gamma", &a);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expected fixed, poisson or gamma, got 'Gamma'"), std::string::npos);
}

}  // namespace
}  // namespace torchfarm
