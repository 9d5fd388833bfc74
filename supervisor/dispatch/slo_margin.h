// SloMargin: how much the latency objective (a model's latency_slo_ms, docs/scheduling.md) should
// distrust its learned batch cost, from the answers that missed their deadline anyway.
//
// The cost model (dispatch_planner.h BatchCostModel) predicts a batch's mean service time; a
// request accepted because its predicted finish fits the deadline still misses when its batch
// runs long (a descheduled worker on shared cores, a slow tail of the model). So every SLO outcome
// feeds this controller: a miss multiplies the factor by kMissStep; an answer within the SLO, and
// a refusal (the farm did not try, so it proved nothing against the estimate), divide it by the
// step that makes kTargetMissRate of the outcomes the equilibrium. Counting refusals keeps a
// margin that refuses everything from staying there: it decays until requests are accepted
// again. Planning multiplies the learned cost by factor(), which refuses and sheds earlier and
// forms smaller batches while requests miss, and goes back to the plain estimate once they stop.
// Bounded [1, kMaxFactor]. Pure; the loop thread owns each one.
#pragma once

#include <cstdint>

namespace torchfarm {

class SloMargin {
 public:
  // Misses the farm aims for among the SLO outcomes (answers and refusals).
  static constexpr double kTargetMissRate = 0.01;
  static constexpr double kMissStep = 1.05;
  static constexpr double kMaxFactor = 4.0;

  // One answered request with an SLO deadline: within it, or not (also one that expired queued).
  void Observe(bool within);
  // One request refused or shed because it could not make its SLO deadline.
  void ObserveRefusal() { Observe(true); }
  double factor() const { return factor_; }

 private:
  double factor_ = 1.0;
};

}  // namespace torchfarm
