// SloMargin: how much the latency objective (a model's latency_slo_ms, docs/scheduling.md) should
// distrust its learned batch cost, from the answers that missed their deadline anyway.
//
// The cost model (dispatch_planner.h BatchCostModel) predicts a batch's mean service time; a
// request accepted because its predicted finish fits the deadline still misses when its batch
// runs long (a descheduled worker on shared cores, a slow tail of the model). So every SLO outcome
// feeds this controller: a miss multiplies the factor by kMissStep; an answer within the SLO
// divides it by the step that makes kTargetMissRate of the answers the equilibrium. Planning
// multiplies the learned cost by factor(), which refuses and sheds earlier and forms smaller
// batches while requests miss, and goes back to the plain estimate once they stop.
//
// Refusals say nothing of the estimate (the farm did not try), so they do not count as answers:
// counted, a burst of refusals would dilute the misses of the accepted requests, whose p99 is
// what the SLO promises. One exception keeps a margin that refuses everything from staying
// there: after kStuckRefusals refusals with no answer between that only the margin made (the
// unscaled estimate would have accepted them) while the model had nothing queued or running,
// each further one steps the factor down by kMissStep. An idle model has no answer coming to
// move the factor; under load (anything in flight) refusals never count, however many arrive
// in one turn, and at a low rate the answers between keep the run short.
// Bounded [1, kMaxFactor]. Pure; the loop thread owns each one.
#pragma once

#include <cstdint>

namespace torchfarm {

class SloMargin {
 public:
  // Misses the farm aims for among the answers with an SLO deadline: a fifth of the 1% a p99
  // allows, since the client sees its own transport on top. On 2 cores shared with the load
  // generator that transport added 0.3-0.9% late answers on the transformer (docs/benchmarks.md,
  // "Stop 49"): at a 0.5% aim the client's p99 sat at the SLO, at 0.2% 0.5-1.8 ms under it at
  // the same goodput.
  static constexpr double kTargetMissRate = 0.002;
  static constexpr double kMissStep = 1.05;
  static constexpr double kMaxFactor = 4.0;
  static constexpr int kStuckRefusals = 100;

  // One answered request with an SLO deadline: within it, or not (also one that expired queued).
  void Observe(bool within);
  // One request refused or shed because it could not make its SLO deadline; `only_by_margin`:
  // the unscaled estimate would have accepted it; `model_idle`: the model has no other request
  // queued and no batch running.
  void ObserveRefusal(bool only_by_margin, bool model_idle);
  double factor() const { return factor_; }

 private:
  double factor_ = 1.0;
  int idle_refusals_ = 0;  // margin-only refusals of an idle model since the last answer
};

}  // namespace torchfarm
