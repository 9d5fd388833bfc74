#include "tools/stats_table.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <utility>

#include "tools/stats_fields.h"
#include "tools/text_table.h"

namespace torchfarm {

using nlohmann::json;

namespace {

constexpr auto kLeft = TextTable::Align::kLeft;
constexpr auto kRight = TextTable::Align::kRight;

std::string SupervisorLine(const json& stats) {
  return "supervisor  pid " + TextField(stats, {"supervisor", "pid"}) + "  uptime " +
         FormatSeconds(NumberField(stats, {"supervisor", "uptime_s"})) + "  version " +
         TextField(stats, {"supervisor", "version"}) + "  config " +
         TextField(stats, {"supervisor", "config"}) +
         (FlagField(stats, {"supervisor", "draining"}) ? "  DRAINING" : "");
}

// "zygotes  primary ready pid 4010 (exec, 12 launches, 1 restarts)  standby ...", or "" when the
// supervisor has none (worker_launch "exec", or one that predates them).
std::string ZygoteLine(const json& stats) {
  const json* zygote = FindField(stats, {"supervisor", "zygote"});
  if (zygote == nullptr) return "";
  const json& places = ArrayField(*zygote, "zygotes");
  if (places.empty()) return "";
  std::string line = "zygotes";
  for (const auto& z : places) {
    const auto pid = NumberField(z, {"pid"});
    line += "  " + TextField(z, {"role"}) + " " + TextField(z, {"state"}) + " pid " +
            (pid && *pid > 0 ? FormatCount(pid) : std::string(kMissing)) + " (" +
            TextField(z, {"started_by"}) + ", " + FormatCount(NumberField(z, {"launches"})) +
            " launches, " + FormatCount(NumberField(z, {"restarts"})) + " restarts)";
  }
  return line;
}

std::vector<std::string> ModelTable(const json& models) {
  TextTable table({{"MODEL", kLeft},
                   {"STATE", kLeft},
                   {"QUEUE", kRight},
                   {"REQUESTS", kRight},
                   {"ERRORS", kRight},
                   {"REJECTED", kRight},
                   {"BATCH", kRight},
                   {"RPS_1S", kRight},
                   {"RPS_60S", kRight},
                   {"P50", kRight},
                   {"P99", kRight},
                   {"QUEUE_P99", kRight},
                   {"COMPUTE_P99", kRight}});
  for (const auto& m : models) {
    table.AddRow({{ModelLabel(m, "name")},
                  {TextField(m, {"state"})},
                  {FormatCount(NumberField(m, {"queue_depth"}))},
                  {FormatCount(NumberField(m, {"requests"}))},
                  {FormatCount(NumberField(m, {"errors"}))},
                  {FormatCount(NumberField(m, {"rejected"}))},
                  {FormatDecimal(NumberField(m, {"mean_batch_size"}), 2)},
                  {FormatDecimal(NumberField(m, {"throughput_rps_1s"}), 1)},
                  {FormatDecimal(NumberField(m, {"throughput_rps_60s"}), 1)},
                  {FormatMicros(LatencyField(m, "total", "p50"))},
                  {FormatMicros(LatencyField(m, "total", "p99"))},
                  {FormatMicros(LatencyField(m, "queue", "p99"))},
                  {FormatMicros(LatencyField(m, "compute", "p99"))}});
  }
  return table.Render(/*colour=*/false);
}

}  // namespace

std::string BatchSizesText(const json& model) {
  const json* sizes = FindField(model, {"batch_sizes"});
  if (sizes == nullptr || !sizes->is_object() || sizes->empty()) return kMissing;
  // The keys are bounds ("1", "2", "4", ... "1048577+"): in numeric order, not the JSON's.
  std::vector<std::pair<double, std::string>> buckets;
  for (const auto& [bound, count] : sizes->items()) {
    if (!count.is_number()) continue;
    // "1048577+" (every larger batch) keeps its own spelling; the others are upper bounds.
    const bool open_ended = !bound.empty() && bound.back() == '+';
    buckets.emplace_back(std::atof(bound.c_str()), (open_ended ? "" : "<=") + bound + ":" +
                                                       FormatCompactCount(count.get<double>()));
  }
  std::sort(buckets.begin(), buckets.end());
  std::string text;
  for (const auto& [bound, part] : buckets) text += (text.empty() ? "" : " ") + part;
  return text.empty() ? kMissing : text;
}

std::vector<std::string> RenderSloTable(const json& models) {
  TextTable table({{"MODEL", kLeft},
                   {"SLO", kRight},
                   {"GOODPUT/S", kRight},
                   {"WITHIN", kRight},
                   {"MISSED", kRight},
                   {"REFUSED", kRight},
                   {"WITHIN_%", kRight},
                   {"BATCH", kRight},
                   {"BATCH_SIZES", kLeft}});
  bool any = false;
  for (const auto& m : models) {
    const auto slo_ms = NumberField(m, {"slo", "latency_slo_ms"});
    if (!slo_ms) continue;
    any = true;
    const auto within = NumberField(m, {"slo", "within"});
    const auto missed = NumberField(m, {"slo", "missed"});
    std::optional<double> share;
    if (within && missed && *within + *missed > 0) share = 100 * *within / (*within + *missed);
    table.AddRow({{ModelLabel(m, "name")},
                  {FormatMicros(*slo_ms * 1000)},
                  {FormatDecimal(NumberField(m, {"slo", "goodput_rps_60s"}), 1)},
                  {FormatCount(within)},
                  {FormatCount(missed)},
                  {FormatCount(NumberField(m, {"slo", "refused"}))},
                  {FormatDecimal(share, 1)},
                  {FormatDecimal(NumberField(m, {"mean_batch_size"}), 2)},
                  {BatchSizesText(m)}});
  }
  if (!any) return {};
  return table.Render(/*colour=*/false);
}

namespace {

std::vector<std::string> WorkerTable(const json& workers) {
  TextTable table({{"ID", kRight},
                   {"MODEL", kLeft},
                   {"PID", kRight},
                   {"DEVICE", kLeft},
                   {"STATE", kLeft},
                   {"UPTIME", kRight},
                   {"RESTARTS", kRight},
                   {"LAST_EXIT", kLeft},
                   {"REQUESTS", kRight},
                   {"BATCHES", kRight},
                   {"BATCH", kRight},
                   {"INFLIGHT", kRight},
                   {"RSS", kRight},
                   {"CPU%", kRight},
                   {"GPU_MEM", kRight}});
  for (const auto& w : workers) {
    // A slot between processes reports pid 0 or -1: there is no process to name.
    auto pid = NumberField(w, {"pid"});
    table.AddRow({{TextField(w, {"id"})},
                  {ModelLabel(w, "model")},
                  {pid && *pid > 0 ? FormatCount(pid) : kMissing},
                  {DeviceText(w, /*compact=*/false)},
                  {WorkerStateText(w)},
                  {FormatSeconds(NumberField(w, {"uptime_s"}))},
                  {FormatCount(NumberField(w, {"restarts"}))},
                  {TextField(w, {"last_exit"})},
                  {FormatCount(NumberField(w, {"requests"}))},
                  {FormatCount(NumberField(w, {"batches"}))},
                  {FormatDecimal(NumberField(w, {"mean_batch_size"}), 2)},
                  {FormatCount(NumberField(w, {"inflight"}))},
                  {FormatBytes(NumberField(w, {"rss_bytes"}))},
                  {FormatDecimal(NumberField(w, {"cpu_percent"}), 1)},
                  {FormatBytes(NumberField(w, {"gpu_mem_bytes"}))}});
  }
  return table.Render(/*colour=*/false);
}

// GPU workers only: what their own heartbeats say about the device (docs/gpu.md).
std::vector<std::string> GpuTable(const json& workers) {
  TextTable table({{"ID", kRight},
                   {"GPU", kLeft},
                   {"PRECISION", kLeft},
                   {"STREAMS", kRight},
                   {"PINNED", kLeft},
                   {"MPS", kLeft},
                   {"H2D", kRight},
                   {"COMPUTE", kRight},
                   {"D2H", kRight},
                   {"ALLOCATED", kRight},
                   {"RESERVED", kRight}});
  size_t rows = 0;
  for (const auto& w : workers) {
    if (TextField(w, {"device"}).rfind("cuda", 0) != 0 || FlagField(w, {"fallback"})) continue;
    ++rows;
    auto flag = [&](const char* key) {
      const json* value = FindField(w, {"device_stats", key});
      return value && value->is_boolean() ? (value->get<bool>() ? "yes" : "no") : kMissing;
    };
    table.AddRow({{TextField(w, {"id"})},
                  {TextField(w, {"device_stats", "name"})},
                  {TextField(w, {"device_stats", "precision"})},
                  {FormatCount(NumberField(w, {"device_stats", "streams"}))},
                  {flag("pinned")},
                  {flag("mps_attached")},
                  {FormatMicros(NumberField(w, {"device_stats", "mean_h2d_us"}))},
                  {FormatMicros(NumberField(w, {"device_stats", "mean_compute_us"}))},
                  {FormatMicros(NumberField(w, {"device_stats", "mean_d2h_us"}))},
                  {FormatBytes(NumberField(w, {"device_stats", "memory_allocated"}))},
                  {FormatBytes(NumberField(w, {"device_stats", "memory_reserved"}))}});
  }
  if (rows == 0) return {};
  return table.Render(/*colour=*/false);
}

std::string YesNo(const json& object, const char* key) {
  const json* value = FindField(object, {key});
  if (value == nullptr || !value->is_boolean()) return kMissing;
  return value->get<bool>() ? "yes" : "no";
}

}  // namespace

std::string DeviceText(const json& worker, bool compact) {
  std::string device = TextField(worker, {"device"});
  if (!FlagField(worker, {"fallback"})) return device;
  return compact ? device + "*" : device + " (fallback)";
}

std::vector<std::string> RenderStatsTable(const json& stats) {
  std::vector<std::string> lines = {SupervisorLine(stats)};
  if (std::string zygotes = ZygoteLine(stats); !zygotes.empty()) lines.push_back(zygotes);
  lines.emplace_back();
  for (auto& line : ModelTable(ArrayField(stats, "models"))) lines.push_back(std::move(line));
  std::vector<std::string> slo = RenderSloTable(ArrayField(stats, "models"));
  if (!slo.empty()) {
    lines.emplace_back();
    for (auto& line : slo) lines.push_back(std::move(line));
  }
  lines.emplace_back();
  for (auto& line : WorkerTable(ArrayField(stats, "workers"))) lines.push_back(std::move(line));
  std::vector<std::string> gpu = GpuTable(ArrayField(stats, "workers"));
  if (!gpu.empty()) {
    lines.emplace_back();
    lines.push_back("gpu  mps " + TextField(stats, {"gpu", "mps_state"}));
    for (auto& line : gpu) lines.push_back(std::move(line));
  }
  return lines;
}

std::vector<std::string> RenderHealthTable(const json& health) {
  std::vector<std::string> lines = {"live " + YesNo(health, "live") + "  ready " +
                                    YesNo(health, "ready") + "  draining " +
                                    YesNo(health, "draining")};
  const json* models = FindField(health, {"models"});
  if (models == nullptr || !models->is_array() || models->empty()) return lines;
  TextTable table({{"MODEL", TextTable::Align::kLeft},
                   {"READY", TextTable::Align::kLeft},
                   {"WORKERS", TextTable::Align::kLeft}});
  for (const auto& m : *models) {
    // Older supervisors send no per-model "ready": a model with a ready worker is ready.
    std::string ready = YesNo(m, "ready");
    auto ready_workers = NumberField(m, {"ready_workers"});
    if (ready == kMissing && ready_workers) ready = *ready_workers > 0 ? "yes" : "no";
    table.AddRow(
        {{ModelLabel(m, "name")},
         {ready},
         {FormatCount(ready_workers) + "/" + FormatCount(NumberField(m, {"workers"})) + " ready"}});
  }
  for (auto& line : table.Render(/*colour=*/false)) lines.push_back(std::move(line));
  return lines;
}

}  // namespace torchfarm
