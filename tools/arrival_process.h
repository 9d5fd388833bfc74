// When the open loop of `torchfarm bench` sends its next request: the gaps between arrivals.
//
//   fixed    every gap is the mean (1/rate): the evenly spaced stream `--rate` always sent.
//   poisson  exponential gaps (coefficient of variation 1): independent users.
//   gamma    gamma gaps with a chosen coefficient of variation `cv` (shape 1/cv^2, scale
//            mean * cv^2): cv > 1 is bursty (many short gaps, a few long silences), the load the
//            latency-SLO scheduler is measured under (issue 32; Clockwork, OSDI 2020, used the
//            same model); cv < 1 is smoother than Poisson.
//
// Pure and seeded: the same (arrival, mean, cv, seed) gives the same gaps, so a bench step can be
// repeated. Each generator thread owns one (LoadGenerator::RunOpenLoop); with --threads 1 the
// whole stream has exactly this distribution, with T threads it is the merge of T such streams at
// rate/T each (burstier streams merge into a smoother one: use --threads 1 for a high cv).
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "common/status.h"

namespace torchfarm {

enum class Arrival { kFixed, kPoisson, kGamma };

// "fixed" | "poisson" | "gamma"; anything else is INVALID_ARGUMENT naming what was given.
Status ParseArrival(const std::string& text, Arrival* out);
const char* ArrivalName(Arrival arrival);

class ArrivalProcess {
 public:
  // `mean_gap_ns` > 0. `cv` is used by kGamma only (0 < cv <= kMaxCv).
  ArrivalProcess(Arrival arrival, double mean_gap_ns, double cv, uint64_t seed);

  static constexpr double kMaxCv = 100;

  // The next gap in nanoseconds (>= 0).
  double NextGapNs();

 private:
  Arrival arrival_;
  double mean_gap_ns_;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> exponential_;
  std::gamma_distribution<double> gamma_;
};

}  // namespace torchfarm
