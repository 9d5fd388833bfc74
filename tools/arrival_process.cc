#include "tools/arrival_process.h"

namespace torchfarm {

Status ParseArrival(const std::string& text, Arrival* out) {
  if (text == "fixed") {
    *out = Arrival::kFixed;
  } else if (text == "poisson") {
    *out = Arrival::kPoisson;
  } else if (text == "gamma") {
    *out = Arrival::kGamma;
  } else {
    return InvalidArgument("--arrival: expected fixed, poisson or gamma, got '" + text + "'");
  }
  return Status::Ok();
}

const char* ArrivalName(Arrival arrival) {
  switch (arrival) {
    case Arrival::kFixed:
      return "fixed";
    case Arrival::kPoisson:
      return "poisson";
    case Arrival::kGamma:
      return "gamma";
  }
  return "?";
}

// The distributions are built for a mean gap of 1 and scaled by the mean: exponential(1), and
// gamma(shape 1/cv^2, scale cv^2), whose mean is 1 and standard deviation cv.
ArrivalProcess::ArrivalProcess(Arrival arrival, double mean_gap_ns, double cv, uint64_t seed)
    : arrival_(arrival),
      mean_gap_ns_(mean_gap_ns),
      rng_(seed),
      exponential_(1.0),
      gamma_(arrival == Arrival::kGamma ? 1.0 / (cv * cv) : 1.0,
             arrival == Arrival::kGamma ? cv * cv : 1.0) {}

double ArrivalProcess::NextGapNs() {
  switch (arrival_) {
    case Arrival::kFixed:
      return mean_gap_ns_;
    case Arrival::kPoisson:
      return mean_gap_ns_ * exponential_(rng_);
    case Arrival::kGamma:
      return mean_gap_ns_ * gamma_(rng_);
  }
  return mean_gap_ns_;
}

}  // namespace torchfarm
