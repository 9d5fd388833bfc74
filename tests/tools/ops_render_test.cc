// The pure renderers behind `torchfarm stats`, `top` and `ctl health`, on fixed admin replies:
// one with every field of the admin protocol (docs/operations.md) and one as sparse as an older
// supervisor's. No processes, no terminal.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "common/config.h"
#include "tools/stats_fields.h"
#include "tools/stats_table.h"
#include "tools/text_table.h"
#include "tools/top_view.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

json Latency(double p50, double p99) { return {{"p50", p50}, {"p99", p99}}; }

json Worker(int id, const std::string& model, int pid, const std::string& state) {
  return {{"id", id},
          {"model", model},
          {"pid", pid},
          {"device", "cpu"},
          {"fallback", false},
          {"state", state},
          {"uptime_s", 3725.0},
          {"restarts", id},
          {"last_exit", id == 0 ? "" : "signal 9"},
          {"requests", 12345 + id},
          {"batches", 4000},
          {"mean_batch_size", 3.09},
          {"inflight", 1},
          {"rss_bytes", 123.4 * 1024 * 1024},
          {"cpu_percent", 45.04},
          {"gpu_mem_bytes", nullptr}};
}

// Every field the admin protocol defines.
json FullStats() {
  json mlp = {{"name", "mlp"},
              {"state", "available"},
              {"queue_depth", 3},
              {"requests", 24691},
              {"errors", 2},
              {"rejected", 1},
              {"mean_batch_size", 3.5},
              {"latency_us",
               {{"queue", Latency(40, 900)},
                {"compute", Latency(800, 2500)},
                {"total", Latency(1200, 3400)}}},
              {"throughput_rps_1s", 1000.25},
              {"throughput_rps_60s", 950.0}};
  json convnet = mlp;
  convnet["name"] = "convnet";
  convnet["state"] = "unavailable";
  convnet["queue_depth"] = 0;
  convnet["throughput_rps_1s"] = 234.25;
  convnet["latency_us"]["total"] = Latency(5000, 12500);
  json gpu_worker = Worker(2, "convnet", 4003, "failed");
  gpu_worker["device"] = "cuda:0";
  gpu_worker["fallback"] = true;
  gpu_worker["gpu_mem_bytes"] = 2.5 * 1024 * 1024 * 1024;
  return {
      {"supervisor",
       {{"pid", 4000},
        {"uptime_s", 3725.5},
        {"version", "0.1.0"},
        {"config", "/etc/torchfarm/demo.json"}}},
      {"models", {mlp, convnet}},
      {"workers", {Worker(0, "mlp", 4001, "ready"), Worker(1, "mlp", 4002, "busy"), gpu_worker}}};
}

// What a supervisor that predates the operations fields sends.
json SparseStats() {
  return {{"supervisor", {{"pid", 4000}}},
          {"models", {{{"name", "mlp"}, {"queue_depth", 0}}}},
          {"workers", {{{"id", 0}, {"model", "mlp"}, {"pid", 4001}, {"state", "starting"}}}}};
}

bool HasEscape(const std::vector<std::string>& lines) {
  return std::any_of(lines.begin(), lines.end(),
                     [](const std::string& l) { return l.find('\x1b') != std::string::npos; });
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  return text;
}

// The whitespace-separated words of `line`.
std::vector<std::string> Words(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

// The line starting with `prefix` (after leading spaces), or "".
std::string LineStartingWith(const std::vector<std::string>& lines, const std::string& prefix) {
  for (const auto& l : lines) {
    size_t start = l.find_first_not_of(' ');
    if (start != std::string::npos && l.compare(start, prefix.size(), prefix) == 0) return l;
  }
  return "";
}

// --- fields -------------------------------------------------------------------------------------

TEST(StatsFieldsTest, AbsentNullAndWrongTypesReadAsMissing) {
  json j = {{"a", {{"b", 2}}}, {"n", nullptr}, {"s", "text"}, {"empty", ""}, {"t", true}};
  EXPECT_EQ(NumberField(j, {"a", "b"}), 2.0);
  EXPECT_FALSE(NumberField(j, {"a", "c"}));
  EXPECT_FALSE(NumberField(j, {"a", "b", "c"}));
  EXPECT_FALSE(NumberField(j, {"n"}));
  EXPECT_FALSE(NumberField(j, {"s"}));
  EXPECT_EQ(NumberField(j, {"t"}), 1.0);
  EXPECT_EQ(TextField(j, {"s"}), "text");
  EXPECT_EQ(TextField(j, {"a", "b"}), "2");
  EXPECT_EQ(TextField(j, {"a"}), "-");
  EXPECT_EQ(TextField(j, {"n"}), "-");
  EXPECT_EQ(TextField(j, {"empty"}), "-");
  EXPECT_EQ(TextField(json::array(), {"x"}), "-");
}

TEST(StatsFieldsTest, FormatsUnits) {
  EXPECT_EQ(FormatCount(12345.4), "12345");
  EXPECT_EQ(FormatCount(std::nullopt), "-");
  EXPECT_EQ(FormatCompactCount(9999), "9999");
  EXPECT_EQ(FormatCompactCount(12345), "12.3k");
  EXPECT_EQ(FormatCompactCount(4'560'000), "4.56M");
  EXPECT_EQ(FormatDecimal(2.345, 1), "2.3");
  EXPECT_EQ(FormatMicros(850), "850us");
  EXPECT_EQ(FormatMicros(1250), "1.25ms");
  EXPECT_EQ(FormatMicros(12500), "12.5ms");
  EXPECT_EQ(FormatMicros(3'400'000), "3.40s");
  EXPECT_EQ(FormatSeconds(45.7), "45s");
  EXPECT_EQ(FormatSeconds(723), "12m03s");
  EXPECT_EQ(FormatSeconds(3725), "1h02m");
  EXPECT_EQ(FormatSeconds(2 * 86400 + 3 * 3600 + 59), "2d03h");
  EXPECT_EQ(FormatSeconds(-1), "-");
  EXPECT_EQ(FormatBytes(512), "512B");
  EXPECT_EQ(FormatBytes(64 * 1024), "64.0K");
  EXPECT_EQ(FormatBytes(123.4 * 1024 * 1024), "123.4M");
  EXPECT_EQ(FormatBytes(2.5 * 1024 * 1024 * 1024), "2.50G");
  EXPECT_EQ(FormatBytes(std::nullopt), "-");
}

// --- text table ---------------------------------------------------------------------------------

TEST(TextTableTest, AlignsColumnsAndTrimsTrailingSpaces) {
  TextTable table({{"NAME", TextTable::Align::kLeft}, {"N", TextTable::Align::kRight}});
  table.AddRow({{"a"}, {"100"}});
  table.AddRow({{"longer"}, {"7"}});
  EXPECT_EQ(table.Render(false),
            (std::vector<std::string>{"NAME      N", "a       100", "longer    7"}));
}

TEST(TextTableTest, ColoursOnlyWhenEnabledAndOutsideTheWidth) {
  TextTable table({{"STATE", TextTable::Align::kLeft}, {"X", TextTable::Align::kLeft}});
  table.AddRow({{"ok", Colour::kGreen}, {"x"}});
  auto plain = table.Render(false);
  auto coloured = table.Render(true);
  EXPECT_FALSE(HasEscape(plain));
  EXPECT_EQ(plain[1], "ok     x");
  EXPECT_EQ(coloured[1], "\x1b[32mok\x1b[0m     x");
  EXPECT_EQ(VisibleWidth(coloured[1]), plain[1].size());
}

TEST(TextTableTest, TruncationKeepsEscapesWholeAndResetsColour) {
  std::string line = "ab" + Paint("cdef", Colour::kRed, true) + "gh";
  EXPECT_EQ(VisibleWidth(line), 8u);
  EXPECT_EQ(TruncateVisible(line, 8), line);
  EXPECT_EQ(TruncateVisible(line, 4), "ab\x1b[31mcd\x1b[0m");
  EXPECT_EQ(TruncateVisible(line, 2), "ab\x1b[31m\x1b[0m");
  EXPECT_EQ(TruncateVisible("plain text", 5), "plain");
}

// --- stats table --------------------------------------------------------------------------------

TEST(StatsTableTest, HasEveryColumnAndValue) {
  auto lines = RenderStatsTable(FullStats());
  std::string text = Joined(lines);
  EXPECT_FALSE(HasEscape(lines));
  EXPECT_THAT(lines[0], HasSubstr("pid 4000"));
  EXPECT_THAT(lines[0], HasSubstr("uptime 1h02m"));
  EXPECT_THAT(lines[0], HasSubstr("/etc/torchfarm/demo.json"));
  for (const char* column : {"MODEL", "STATE", "QUEUE", "REQUESTS", "ERRORS", "REJECTED", "BATCH",
                             "RPS_1S", "RPS_60S", "P50", "P99", "QUEUE_P99", "COMPUTE_P99"}) {
    EXPECT_THAT(LineStartingWith(lines, "MODEL"), HasSubstr(column));
  }
  for (const char* column : {"ID", "PID", "DEVICE", "UPTIME", "RESTARTS", "LAST_EXIT", "BATCHES",
                             "INFLIGHT", "RSS", "CPU%", "GPU_MEM"}) {
    EXPECT_THAT(LineStartingWith(lines, "ID"), HasSubstr(column));
  }
  std::string mlp = LineStartingWith(lines, "mlp ");
  for (const char* value :
       {"available", "24691", "3.50", "1000.2", "950.0", "1.20ms", "3.40ms", "900us", "2.50ms"}) {
    EXPECT_THAT(mlp, HasSubstr(value));
  }
  std::string gpu = LineStartingWith(lines, "2 ");
  for (const char* value :
       {"convnet", "4003", "cuda:0 (fallback)", "failed", "signal 9", "2.50G", "123.4M", "45.0"}) {
    EXPECT_THAT(gpu, HasSubstr(value));
  }
  // The CPU workers have no GPU memory: a dash, not a zero.
  EXPECT_EQ(LineStartingWith(lines, "0 ").back(), '-');
}

// Issue 32: a model with latency_slo_ms gets a row in the SLO table; without one, no table.
TEST(StatsTableTest, ModelsWithALatencyObjectiveGetAnSloTable) {
  json stats = FullStats();
  EXPECT_THAT(Joined(RenderStatsTable(stats)), Not(HasSubstr("WITHIN_%")));
  stats["models"][0]["slo"] = {{"latency_slo_ms", 20},
                               {"within", 950},
                               {"missed", 50},
                               {"refused", 300},
                               {"goodput_rps_60s", 15.83}};
  stats["models"][0]["batch_sizes"] = {{"8", 1500}, {"1", 12}, {"4", 300}};
  auto lines = RenderStatsTable(stats);
  std::string header;
  for (const auto& line : lines) {
    if (line.find("WITHIN_%") != std::string::npos) header = line;
  }
  ASSERT_FALSE(header.empty()) << Joined(lines);
  for (const char* column :
       {"MODEL", "SLO", "GOODPUT/S", "WITHIN", "MISSED", "REFUSED", "BATCH", "BATCH_SIZES"}) {
    EXPECT_THAT(header, HasSubstr(column));
  }
  std::string row;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    if (lines[i] == header) row = lines[i + 1];
  }
  for (const char* value :
       {"mlp", "20.0ms", "15.8", "950", "50", "300", "95.0", "3.50", "<=1:12 <=4:300 <=8:1500"}) {
    EXPECT_THAT(row, HasSubstr(value)) << row;
  }
  // top shows the same table between the models and the workers.
  auto top = RenderTopView(stats, {200, 50, false, true});
  EXPECT_THAT(Joined(top), HasSubstr("GOODPUT/S"));
  EXPECT_THAT(Joined(top), HasSubstr("<=1:12 <=4:300 <=8:1500"));
  EXPECT_THAT(Joined(RenderTopView(FullStats(), {200, 50, false, true})), Not(HasSubstr("GOODPUT")))
      << "no model with an SLO: no table";
  // The last bucket (every batch over 2^20 rows) keeps its spelling; no histogram is a dash.
  EXPECT_EQ(BatchSizesText(json{{"batch_sizes", {{"1048577+", 2}, {"2", 3}}}}), "<=2:3 1048577+:2");
  EXPECT_EQ(BatchSizesText(json::object()), "-");
}

TEST(StatsTableTest, ZygotesGetALineWithStatePidLaunchesAndRestarts) {
  json stats = FullStats();
  EXPECT_THAT(Joined(RenderStatsTable(stats)), Not(HasSubstr("zygotes")))
      << "none in the stats (worker_launch exec, an older supervisor): no line";
  stats["supervisor"]["zygote"] = {{"pid", 4010},
                                   {"ready", true},
                                   {"zygotes",
                                    {{{"role", "primary"},
                                      {"state", "ready"},
                                      {"pid", 4010},
                                      {"started_by", "exec"},
                                      {"launches", 12},
                                      {"restarts", 1}},
                                     {{"role", "standby"},
                                      {"state", "down"},
                                      {"pid", -1},
                                      {"started_by", "fork"},
                                      {"launches", 0},
                                      {"restarts", 3}}}}};
  auto lines = RenderStatsTable(stats);
  EXPECT_EQ(lines[1],
            "zygotes  primary ready pid 4010 (exec, 12 launches, 1 restarts)  standby "
            "down pid - (fork, 0 launches, 3 restarts)");
  EXPECT_EQ(lines[2], "");
}

TEST(StatsTableTest, GpuWorkersGetADeviceTable) {
  json stats = FullStats();
  EXPECT_EQ(Joined(RenderStatsTable(stats)).find("PRECISION"), std::string::npos)
      << "no GPU table while no worker runs on a GPU";
  json worker = Worker(3, "resnet", 4004, "ready");
  worker["device"] = "cuda:0";
  worker["device_stats"] = {{"name", "NVIDIA H200"}, {"precision", "fp16"}, {"streams", 2},
                            {"pinned", true}, {"mps_attached", true}, {"mean_h2d_us", 120.0},
                            {"mean_compute_us", 2500.0}, {"mean_d2h_us", 40.0},
                            {"memory_allocated", 512.0 * 1024 * 1024},
                            {"memory_reserved", 1024.0 * 1024 * 1024}};
  stats["workers"].push_back(worker);
  stats["gpu"] = {{"mps", "auto"}, {"mps_state", "active (existing daemon)"}};
  auto lines = RenderStatsTable(stats);
  EXPECT_THAT(Joined(lines), HasSubstr("gpu  mps active (existing daemon)"));
  std::string header = LineStartingWith(lines, "ID  GPU");
  ASSERT_FALSE(header.empty()) << Joined(lines);
  std::string row = lines.back();
  for (const char* value : {"NVIDIA H200", "fp16", "2", "yes", "120us", "2.50ms", "40us", "512.0M", "1.00G"}) {
    EXPECT_THAT(row, HasSubstr(value));
  }
}

TEST(StatsTableTest, ColumnsLineUp) {
  auto lines = RenderStatsTable(FullStats());
  std::string header = LineStartingWith(lines, "ID");
  size_t state = header.find("STATE");
  for (const char* id : {"0 ", "1 ", "2 "}) {
    std::string row = LineStartingWith(lines, id);
    EXPECT_TRUE(row.compare(state, 4, "read") == 0 || row.compare(state, 4, "busy") == 0 ||
                row.compare(state, 4, "fail") == 0)
        << row;
  }
}

TEST(StatsTableTest, MissingFieldsShowAsDashes) {
  auto lines = RenderStatsTable(SparseStats());
  EXPECT_THAT(lines[0], HasSubstr("uptime -"));
  EXPECT_THAT(lines[0], HasSubstr("version -"));
  // name, state (missing), queue depth 0, then 11 missing numbers.
  std::vector<std::string> mlp = Words(LineStartingWith(lines, "mlp"));
  std::vector<std::string> expected_model = {"mlp", "-", "0"};
  expected_model.resize(13, "-");
  EXPECT_EQ(mlp, expected_model);
  // id, model, pid, device (missing), state, then 10 missing fields.
  std::vector<std::string> worker = Words(LineStartingWith(lines, "0 "));
  std::vector<std::string> expected_worker = {"0", "mlp", "4001", "-", "starting"};
  expected_worker.resize(15, "-");
  EXPECT_EQ(worker, expected_worker);
  EXPECT_EQ(RenderStatsTable(json::object()).size(), 5u);  // supervisor, blank, 2 headers, blank
}

TEST(StatsTableTest, WorkerWithoutProcessHasNoPid) {
  json stats = SparseStats();
  stats["workers"][0]["pid"] = -1;
  EXPECT_EQ(Words(LineStartingWith(RenderStatsTable(stats), "0 "))[2], "-");
}

TEST(HealthTableTest, ReadinessPerModel) {
  json health = {{"live", true},
                 {"ready", false},
                 {"draining", false},
                 {"models",
                  {{{"name", "mlp"}, {"ready", true}, {"ready_workers", 2}, {"workers", 2}},
                   {{"name", "convnet"}, {"ready_workers", 0}, {"workers", 1}}}}};
  auto lines = RenderHealthTable(health);
  EXPECT_EQ(lines[0], "live yes  ready no  draining no");
  EXPECT_THAT(LineStartingWith(lines, "mlp"), HasSubstr("yes    2/2 ready"));
  EXPECT_THAT(LineStartingWith(lines, "convnet"), HasSubstr("no     0/1 ready"));
  EXPECT_EQ(RenderHealthTable(json{{"live", true}})[0], "live yes  ready -  draining -");
}

// --- top view -----------------------------------------------------------------------------------

TEST(TopViewTest, HeaderTotals) {
  auto lines = RenderTopView(FullStats(), {200, 50, false, true});
  EXPECT_THAT(lines[0], HasSubstr("pid 4000"));
  EXPECT_THAT(lines[0], HasSubstr("up 1h02m"));
  EXPECT_THAT(lines[0], HasSubstr("(q quits)"));
  EXPECT_THAT(lines[1], HasSubstr("req/s 1234.5"));       // 1000.25 + 234.25
  EXPECT_THAT(lines[1], HasSubstr("p99 12.5ms"));         // the worst model
  EXPECT_THAT(lines[1], HasSubstr("queue 3"));            // 3 + 0
  EXPECT_THAT(lines[1], HasSubstr("restarts 3"));         // 0 + 1 + 2
  EXPECT_THAT(lines[1], HasSubstr("workers 2/3 ready"));  // busy counts as ready, failed not
  EXPECT_THAT(RenderTopView(FullStats(), {200, 50, false, false})[0], Not(HasSubstr("q quits")));
}

TEST(TopViewTest, WarmSparesAreShownAsSparesAndNotCountedAsServing) {
  json stats = FullStats();
  json spare = Worker(3, "mlp", 4004, "ready");
  spare["role"] = "spare";
  stats["workers"].push_back(spare);
  auto lines = RenderTopView(stats, {200, 50, false, true});
  EXPECT_THAT(lines[1], HasSubstr("workers 2/3 ready")) << "the spare is not a serving worker";
  EXPECT_THAT(Joined(lines), HasSubstr("spare ready"));
  EXPECT_THAT(Joined(RenderStatsTable(stats)), HasSubstr("spare ready"));
}

TEST(TopViewTest, ModelAndWorkerLines) {
  auto lines = RenderTopView(FullStats(), {200, 50, false, true});
  for (const char* column :
       {"MODEL", "STATE", "QUEUE", "REQ/S", "P50", "P99", "ERRORS", "WORKERS"}) {
    EXPECT_THAT(LineStartingWith(lines, "MODEL"), HasSubstr(column));
  }
  for (const char* column : {"ID", "PID", "STATE", "DEVICE", "CPU%", "RSS", "GPU", "REQS", "INFL",
                             "RESTARTS", "UPTIME"}) {
    EXPECT_THAT(LineStartingWith(lines, "ID"), HasSubstr(column));
  }
  EXPECT_THAT(LineStartingWith(lines, "mlp"), HasSubstr("2/2"));
  EXPECT_THAT(LineStartingWith(lines, "convnet"), HasSubstr("0/1"));
  std::string gpu = LineStartingWith(lines, "2 ");
  for (const char* value : {"4003", "convnet", "failed", "cuda:0*", "2.50G", "12.3k", "1h02m"}) {
    EXPECT_THAT(gpu, HasSubstr(value));
  }
}

TEST(TopViewTest, FitsEightyByTwentyFour) {
  json stats = FullStats();
  stats["supervisor"]["config"] = "/etc/torchfarm/" + std::string(100, 'x') + ".json";
  auto lines = RenderTopView(stats, {80, 24, true, true});
  EXPECT_LE(lines.size(), 24u);
  for (const auto& line : lines) EXPECT_LE(VisibleWidth(line), 80u) << line;
  EXPECT_EQ(VisibleWidth(lines[0]), 80u);  // the long title is cut, not wrapped
  // Narrower still: every line is cut, escapes stay balanced.
  for (const auto& line : RenderTopView(stats, {30, 24, true, true})) {
    EXPECT_LE(VisibleWidth(line), 30u);
    // Whatever colour the cut left open is closed: the last escape of a line is a reset.
    if (line.find('\x1b') != std::string::npos) {
      EXPECT_EQ(line.rfind("\x1b["), line.rfind("\x1b[0m")) << line;
    }
  }
}

TEST(TopViewTest, TooManyWorkersForTheHeightAreCounted) {
  json stats = FullStats();
  for (int i = 3; i < 40; ++i) stats["workers"].push_back(Worker(i, "mlp", 5000 + i, "ready"));
  auto lines = RenderTopView(stats, {80, 24, false, true});
  ASSERT_EQ(lines.size(), 24u);
  // 2 header lines, blank, 3 model lines, blank, worker header: 15 worker rows, then the notice.
  EXPECT_THAT(lines.back(), HasSubstr("... 25 more workers"));
  EXPECT_THAT(lines[22], HasSubstr("5014"));
  // Unlimited (plain output): every worker.
  auto all = RenderTopView(stats, {0, 0, false, false});
  EXPECT_EQ(all.size(), 8u + 40u);
  EXPECT_THAT(Joined(all), HasSubstr("5039"));
}

TEST(TopViewTest, StateColoursOnlyWhenEnabled) {
  EXPECT_EQ(WorkerStateColour("ready"), Colour::kGreen);
  EXPECT_EQ(WorkerStateColour("busy"), Colour::kCyan);
  EXPECT_EQ(WorkerStateColour("starting"), Colour::kYellow);
  EXPECT_EQ(WorkerStateColour("restarting"), Colour::kYellow);
  EXPECT_EQ(WorkerStateColour("failed"), Colour::kRed);
  EXPECT_EQ(WorkerStateColour("stopping"), Colour::kGrey);
  EXPECT_EQ(WorkerStateColour("stopped"), Colour::kGrey);
  EXPECT_EQ(WorkerStateColour("something new"), Colour::kNone);

  EXPECT_FALSE(HasEscape(RenderTopView(FullStats(), {80, 24, false, true})));
  auto coloured = RenderTopView(FullStats(), {80, 24, true, true});
  EXPECT_THAT(LineStartingWith(coloured, "0 "), HasSubstr("\x1b[32mready\x1b[0m"));
  EXPECT_THAT(LineStartingWith(coloured, "1 "), HasSubstr("\x1b[36mbusy\x1b[0m"));
  EXPECT_THAT(LineStartingWith(coloured, "2 "), HasSubstr("\x1b[31mfailed\x1b[0m"));
}

TEST(TopViewTest, MissingFieldsShowAsDashes) {
  auto lines = RenderTopView(SparseStats(), {80, 24, false, true});
  EXPECT_FALSE(HasEscape(lines));
  EXPECT_THAT(lines[0], HasSubstr("up -"));
  EXPECT_THAT(lines[1], HasSubstr("req/s -  p99 -  queue 0  restarts -  workers 0/1 ready"));
  // id, pid, model, state, then 8 missing fields.
  std::vector<std::string> expected = {"0", "4001", "mlp", "starting"};
  expected.resize(12, "-");
  EXPECT_EQ(Words(LineStartingWith(lines, "0 ")), expected);
  EXPECT_LE(RenderTopView(json::object(), {80, 24, true, true}).size(), 24u);
}

TEST(TopViewTest, IdleLatenciesAndDrainingAreShown) {
  json stats = FullStats();
  // A stage that recorded nothing yet reports 0: that is "no data", not "instant".
  for (auto& m : stats["models"]) {
    for (const char* stage : {"queue", "compute", "total"}) {
      m["latency_us"][stage] = {{"count", 0}, {"p50", 0}, {"p99", 0}};
    }
  }
  stats["supervisor"]["draining"] = true;
  auto top = RenderTopView(stats, {120, 24, false, true});
  EXPECT_THAT(top[1], HasSubstr("p99 -"));
  EXPECT_THAT(top[1], HasSubstr("DRAINING"));
  EXPECT_THAT(LineStartingWith(top, "mlp"), Not(HasSubstr("0us")));
  auto table = RenderStatsTable(stats);
  EXPECT_THAT(table[0], HasSubstr("DRAINING"));
  EXPECT_THAT(LineStartingWith(table, "mlp"), Not(HasSubstr("0us")));
  stats["models"][0]["latency_us"]["total"] = {{"count", 5}, {"p50", 0}, {"p99", 800}};
  EXPECT_THAT(RenderTopView(stats, {120, 24, false, true})[1], HasSubstr("p99 800us"));
}

TEST(TopViewTest, ErrorScreen) {
  auto lines = RenderTopError("ipc:///x.sock", "no answer", {80, 24, false, true});
  EXPECT_THAT(Joined(lines), HasSubstr("ipc:///x.sock"));
  EXPECT_THAT(Joined(lines), HasSubstr("error: no answer"));
  EXPECT_FALSE(HasEscape(lines));
}

// --- the example config of the systemd units -----------------------------------------------------

TEST(ServiceConfigTest, ExampleEtcConfigParsesWithRunDirUnderRun) {
  FarmConfig config;
  Status s = LoadConfigFile(std::string(TORCHFARM_SOURCE_DIR) + "/configs/torchfarm.json", &config);
  ASSERT_TRUE(s.ok()) << s.ToString();
  // PrivateTmp=yes hides /tmp from other processes: the admin socket must live in /run.
  EXPECT_EQ(config.run_dir, "/run/torchfarm");
}

}  // namespace
}  // namespace torchfarm
