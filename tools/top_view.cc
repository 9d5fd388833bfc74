#include "tools/top_view.h"

#include <algorithm>
#include <map>

#include "tools/stats_fields.h"
#include "tools/stats_table.h"

namespace torchfarm {

using nlohmann::json;

namespace {

constexpr auto kAlignLeft = TextTable::Align::kLeft;
constexpr auto kAlignRight = TextTable::Align::kRight;

bool CountsAsReady(const std::string& state) { return state == "ready" || state == "busy"; }

// Sums one numeric field over `items`; nullopt when no item has it.
std::optional<double> Total(const json& items, std::initializer_list<std::string_view> path) {
  std::optional<double> total;
  for (const auto& item : items) {
    if (auto value = NumberField(item, path)) total = total.value_or(0) + *value;
  }
  return total;
}

// The worst p99 over the models that recorded any.
std::optional<double> MaxLatency(const json& models) {
  std::optional<double> worst;
  for (const auto& m : models) {
    auto p99 = LatencyField(m, "total", "p99");
    if (p99 && (!worst || *p99 > *worst)) worst = p99;
  }
  return worst;
}

struct ReadyCount {
  int ready = 0;
  int total = 0;
};

std::string ReadyText(const ReadyCount& count) {
  return std::to_string(count.ready) + "/" + std::to_string(count.total);
}

std::vector<std::string> HeaderLines(const json& stats,
                                     const std::map<std::string, ReadyCount>& by_model,
                                     const TopViewOptions& options) {
  const json& models = ArrayField(stats, "models");
  const json& workers = ArrayField(stats, "workers");
  ReadyCount all;
  for (const auto& [name, count] : by_model) {
    all.ready += count.ready;
    all.total += count.total;
  }
  std::string title = "torchfarm  pid " + TextField(stats, {"supervisor", "pid"}) + "  up " +
                      FormatSeconds(NumberField(stats, {"supervisor", "uptime_s"})) + "  v" +
                      TextField(stats, {"supervisor", "version"}) + "  " +
                      TextField(stats, {"supervisor", "config"});
  if (options.interactive) title += "  (q quits)";
  std::string draining = FlagField(stats, {"supervisor", "draining"})
                             ? Paint("  DRAINING", Colour::kRed, options.colour)
                             : "";
  Colour ready_colour = all.total > 0 && all.ready == all.total ? Colour::kGreen : Colour::kYellow;
  if (all.total > 0 && all.ready == 0) ready_colour = Colour::kRed;
  std::string totals = "req/s " + FormatDecimal(Total(models, {"throughput_rps_1s"}), 1) +
                       "  p99 " + FormatMicros(MaxLatency(models)) + "  queue " +
                       FormatCount(Total(models, {"queue_depth"})) + "  restarts " +
                       FormatCount(Total(workers, {"restarts"})) + "  workers " +
                       Paint(ReadyText(all), ready_colour, options.colour) + " ready" + draining;
  return {Paint(title, Colour::kBold, options.colour), totals};
}

std::vector<std::string> ModelLines(const json& models,
                                    const std::map<std::string, ReadyCount>& by_model,
                                    const TopViewOptions& options) {
  TextTable table({{"MODEL", kAlignLeft},
                   {"STATE", kAlignLeft},
                   {"QUEUE", kAlignRight},
                   {"REQ/S", kAlignRight},
                   {"P50", kAlignRight},
                   {"P99", kAlignRight},
                   {"ERRORS", kAlignRight},
                   {"WORKERS", kAlignLeft}},
                  /*gap=*/2);
  for (const auto& m : models) {
    std::string name = ModelLabel(m, "name");
    std::string state = TextField(m, {"state"});
    Colour state_colour = state == "available"     ? Colour::kGreen
                          : state == "unavailable" ? Colour::kRed
                                                   : Colour::kNone;
    auto count = by_model.find(name);
    table.AddRow({{name},
                  {state, state_colour},
                  {FormatCount(NumberField(m, {"queue_depth"}))},
                  {FormatDecimal(NumberField(m, {"throughput_rps_1s"}), 1)},
                  {FormatMicros(LatencyField(m, "total", "p50"))},
                  {FormatMicros(LatencyField(m, "total", "p99"))},
                  {FormatCompactCount(NumberField(m, {"errors"}))},
                  {count == by_model.end() ? kMissing : ReadyText(count->second)}});
  }
  return table.Render(options.colour);
}

std::vector<std::string> WorkerLines(const json& workers, const TopViewOptions& options) {
  TextTable table({{"ID", kAlignRight},
                   {"PID", kAlignRight},
                   {"MODEL", kAlignLeft},
                   {"STATE", kAlignLeft},
                   {"DEVICE", kAlignLeft},
                   {"CPU%", kAlignRight},
                   {"RSS", kAlignRight},
                   {"GPU", kAlignRight},
                   {"REQS", kAlignRight},
                   {"RESTARTS", kAlignRight},
                   {"UPTIME", kAlignRight},
                   {"INFL", kAlignRight}},
                  /*gap=*/2);
  for (const auto& w : workers) {
    auto pid = NumberField(w, {"pid"});
    std::string state = TextField(w, {"state"});
    table.AddRow({{TextField(w, {"id"})},
                  {pid && *pid > 0 ? FormatCount(pid) : kMissing},
                  {ModelLabel(w, "model")},
                  {WorkerStateText(w), WorkerStateColour(state)},
                  {DeviceText(w, /*compact=*/true)},
                  {FormatDecimal(NumberField(w, {"cpu_percent"}), 1)},
                  {FormatBytes(NumberField(w, {"rss_bytes"}))},
                  {FormatBytes(NumberField(w, {"gpu_mem_bytes"}))},
                  {FormatCompactCount(NumberField(w, {"requests"}))},
                  {FormatCount(NumberField(w, {"restarts"}))},
                  {FormatSeconds(NumberField(w, {"uptime_s"}))},
                  {FormatCount(NumberField(w, {"inflight"}))}});
  }
  return table.Render(options.colour);
}

// Cuts the worker table so everything fits `height`, naming what was left out.
void FitHeight(std::vector<std::string>* lines, size_t worker_start, size_t worker_count,
               int height) {
  if (height <= 0 || lines->size() <= static_cast<size_t>(height)) return;
  size_t limit = static_cast<size_t>(height);
  // Keep the worker header and at least one line for the notice when the workers start in view.
  if (worker_start + 1 < limit) {
    size_t shown = limit - worker_start - 1;  // worker rows plus the header, minus the notice
    size_t hidden = worker_count + 1 - shown;
    lines->resize(limit - 1);
    lines->push_back("... " + std::to_string(hidden) + " more worker" + (hidden == 1 ? "" : "s") +
                     " (enlarge the terminal, or run `torchfarm stats`)");
    return;
  }
  lines->resize(limit);
}

}  // namespace

Colour WorkerStateColour(const std::string& state) {
  if (state == "ready") return Colour::kGreen;
  if (state == "busy") return Colour::kCyan;
  if (state == "starting" || state == "restarting" || state == "draining") return Colour::kYellow;
  if (state == "failed") return Colour::kRed;
  if (state == "stopping" || state == "stopped") return Colour::kGrey;
  return Colour::kNone;
}

std::vector<std::string> RenderTopView(const json& stats, const TopViewOptions& options) {
  const json& workers = ArrayField(stats, "workers");
  std::map<std::string, ReadyCount> by_model;
  for (const auto& m : ArrayField(stats, "models")) by_model[ModelLabel(m, "name")];
  for (const auto& w : workers) {
    if (TextField(w, {"role"}) == "spare") continue;  // warm spares are not serving workers
    ReadyCount& count = by_model[ModelLabel(w, "model")];
    ++count.total;
    count.ready += CountsAsReady(TextField(w, {"state"}));
  }
  std::vector<std::string> lines = HeaderLines(stats, by_model, options);
  lines.emplace_back();
  for (auto& line : ModelLines(ArrayField(stats, "models"), by_model, options)) {
    lines.push_back(std::move(line));
  }
  // Models with a latency objective: goodput, refused, missed and the batch sizes chosen.
  std::vector<std::string> slo = RenderSloTable(ArrayField(stats, "models"));
  if (!slo.empty()) lines.emplace_back();
  for (auto& line : slo) lines.push_back(std::move(line));
  lines.emplace_back();
  size_t worker_start = lines.size();
  for (auto& line : WorkerLines(workers, options)) lines.push_back(std::move(line));
  FitHeight(&lines, worker_start, workers.size(), options.height);
  if (options.width > 0) {
    for (auto& line : lines) {
      line = TruncateVisible(line, static_cast<size_t>(options.width));
      line.erase(line.find_last_not_of(' ') + 1);  // a cut between columns leaves their gap
    }
  }
  return lines;
}

std::vector<std::string> RenderTopError(const std::string& endpoint, const std::string& error,
                                        const TopViewOptions& options) {
  std::vector<std::string> lines = {
      Paint("torchfarm top  " + endpoint + (options.interactive ? "  (q quits)" : ""),
            Colour::kBold, options.colour),
      Paint("error: " + error, Colour::kRed, options.colour), "retrying..."};
  if (options.height > 0 && lines.size() > static_cast<size_t>(options.height)) {
    lines.resize(options.height);
  }
  if (options.width > 0) {
    for (auto& line : lines) line = TruncateVisible(line, static_cast<size_t>(options.width));
  }
  return lines;
}

}  // namespace torchfarm
