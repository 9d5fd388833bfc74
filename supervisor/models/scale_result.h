// The outcome of scaling one model's workers (ModelControl::Scale and ModelTable::ScaleTo, run by
// the admin "scale" command, a reload and a rolled-back rollout): typed in the domain; the admin
// socket's JSON is made from it at the edge (admin/farm_status.h), never read back by the domain.
#pragma once

#include <string>

#include "common/status.h"

namespace torchfarm {

struct ScaleResult {
  Status status;  // not ok: nothing changed, and the message says why
  std::string model;
  int from = 0;  // live workers before
  int to = 0;    // live workers asked for (and started or retired)

  bool ok() const { return status.ok(); }
  // "model 'mlp': 2 -> 4 worker(s)", or the error's message.
  std::string Describe() const {
    if (!status.ok()) return status.message();
    return "model '" + model + "': " + std::to_string(from) + " -> " + std::to_string(to) +
           " worker(s)";
  }
};

}  // namespace torchfarm
