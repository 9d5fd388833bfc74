#include "supervisor/dispatch/slo_margin.h"

#include <algorithm>
#include <cmath>

namespace torchfarm {
namespace {

// The factor an answer within the SLO divides by: kMissStep^(p / (1 - p)), so that with a miss
// rate p the expected change of log(factor) per answer is zero.
double WithinStep() {
  static const double step =
      std::pow(SloMargin::kMissStep, SloMargin::kTargetMissRate / (1 - SloMargin::kTargetMissRate));
  return step;
}

}  // namespace

void SloMargin::Observe(bool within) {
  idle_refusals_ = 0;
  factor_ =
      within ? std::max(1.0, factor_ / WithinStep()) : std::min(kMaxFactor, factor_ * kMissStep);
}

void SloMargin::ObserveRefusal(bool only_by_margin, bool model_idle) {
  if (!only_by_margin || !model_idle) return;
  if (++idle_refusals_ > kStuckRefusals) factor_ = std::max(1.0, factor_ / kMissStep);
}

}  // namespace torchfarm
