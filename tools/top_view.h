// The screen `torchfarm top` draws: totals, one line per model, the latency objectives (the
// models with latency_slo_ms: goodput, refused, missed, batch sizes), one line per worker.
//
// Owns: nothing; pure functions of the admin "stats" reply and the screen geometry, so the layout
// is unit-tested without a terminal or a farm. Fields the reply lacks print as "-".
//
//   torchfarm  pid 4242  up 1h02m  v0.1.0  /etc/torchfarm/demo.json              (q quits)
//   req/s 1234.5  p99 3.40ms  queue 3  restarts 1  workers 2/3 ready
//
//   MODEL  STATE      QUEUE  REQ/S   P50     P99     ERRORS  WORKERS
//   mlp    available      3  1234.5  1.20ms  3.40ms       0  2/3
//
//   ID  PID    MODEL  STATE  DEVICE  CPU%  RSS     GPU  REQS   RESTARTS  UPTIME  INFL
//    0  12345  mlp    ready  cpu     45.0  123.4M  -    12.3k         0  1h02m      1
//
// Worker columns go from most to least telling, so a narrow terminal loses the least.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/text_table.h"

namespace torchfarm {

struct TopViewOptions {
  int width = 80;   // columns; <= 0: no truncation (plain output to a file or pipe)
  int height = 24;  // rows; <= 0: no limit
  bool colour = true;
  bool interactive = true;  // mention the `q` key in the first line
};

// The state colours: ready green, busy cyan, starting/restarting yellow, failed red,
// stopping/stopped grey, anything else uncoloured.
Colour WorkerStateColour(const std::string& state);

// At most `height` lines, each at most `width` visible columns. When the workers do not fit, the
// last line says how many were left out.
std::vector<std::string> RenderTopView(const nlohmann::json& stats, const TopViewOptions& options);

// The screen while the supervisor does not answer: what was tried and that top keeps trying.
std::vector<std::string> RenderTopError(const std::string& endpoint, const std::string& error,
                                        const TopViewOptions& options);

}  // namespace torchfarm
