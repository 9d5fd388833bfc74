// `torchfarm bench` smoke run: a few hundred requests against a real farm (with data frames and
// with client shared memory) and against the echo server; checks the JSON report's shape, zero
// errors, and that error replies are counted by code.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "farm_fixture.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;

struct CommandOutput {
  int exit_code = -1;
  std::string out;
};

// stdout alone, or with stderr after it (`with_stderr`: usage errors are written there).
CommandOutput RunCommand(const std::string& command, bool with_stderr = false) {
  CommandOutput result;
  FILE* pipe = ::popen((command + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
  int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string Bench(const std::string& endpoint, const std::string& args) {
  return BinDir() + "/torchfarm bench --endpoint " + endpoint +
         " --model identity --seconds 1 --warmup 0.2 --concurrency 2 --requests 300 --json " + args;
}

// The fields every step of every report carries.
void ExpectStepShape(const json& step) {
  for (const char* key :
       {"concurrency", "depth", "target_rate", "window_s", "sent", "ok", "requests_per_s",
        "latency_us", "errors", "error_count", "mean_batch_size", "server_us"}) {
    EXPECT_TRUE(step.contains(key)) << key << " missing in " << step.dump();
  }
  const json& latency = step["latency_us"];
  for (const char* key : {"p50", "p90", "p99", "p999", "min", "max", "mean", "count"}) {
    EXPECT_TRUE(latency[key].is_number()) << key << " in " << latency.dump();
  }
  EXPECT_LE(latency["p50"].get<double>(), latency["p99"].get<double>());
  EXPECT_LE(latency["p99"].get<double>(), latency["p999"].get<double>());
}

json Identity(int64_t max_batch) {
  return json::array({{{"name", "identity"},
                       {"path", ModelDir() + "/identity.pt"},
                       {"inputs", {{{"dtype", "float32"}, {"shape", {-1, 256}}}}},
                       {"instances", {{{"device", "cpu"}, {"count", 1}}}},
                       {"max_batch_size", max_batch}}});
}

TEST(BenchSmoke, ClosedLoopAgainstAFarmHasNoErrors) {
  Farm farm(Identity(8));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  std::string admin = "ipc://" + farm.dir() + "/run/admin.sock";
  CommandOutput run = RunCommand(Bench(farm.endpoint(), "--shape 1,256 --admin-endpoint " + admin));
  EXPECT_EQ(run.exit_code, 0) << run.out;
  json report = json::parse(run.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << run.out;
  EXPECT_EQ(report["model"], "identity");
  EXPECT_EQ(report["mode"], "closed");
  EXPECT_EQ(report["shm"], false);
  EXPECT_EQ(report["total_errors"], 0);
  ASSERT_EQ(report["steps"].size(), 1u);
  const json& step = report["steps"][0];
  ExpectStepShape(step);
  EXPECT_EQ(step["concurrency"], 2);
  EXPECT_EQ(step["error_count"], 0);
  EXPECT_TRUE(step["errors"].empty()) << step["errors"].dump();
  EXPECT_GT(step["ok"].get<int64_t>(), 0);
  EXPECT_LE(step["ok"].get<int64_t>(), 300 + 2) << "--requests ends the window";
  EXPECT_GT(step["requests_per_s"].get<double>(), 0);
  ASSERT_TRUE(step["mean_batch_size"].is_number()) << "from the admin socket";
  EXPECT_GE(step["mean_batch_size"].get<double>(), 1.0);
  EXPECT_LE(step["mean_batch_size"].get<double>(), 2.0) << "2 clients, one request each";
  EXPECT_TRUE(step["server_us"]["total"].is_number());
  EXPECT_EQ(farm.Stop(), 0);
}

// Issue 32's load: bursty open-loop arrivals (gamma, cv 4) and a latency objective. The report
// says how it was drawn, every step counts the ok replies within the SLO (never more than ok),
// and a 1 us objective (no reply makes it) and a 60 s one (every reply does) bound the count.
TEST(BenchSmoke, BurstyOpenLoopReportsGoodputWithinTheSlo) {
  Farm farm(Identity(8));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  for (const char* slo : {"0.001", "60000"}) {
    CommandOutput run = RunCommand(
        Bench(farm.endpoint(),
              std::string("--shape 1,256 --rate 400 --arrival gamma --cv 4 --threads 1 --slo-ms ") +
                  slo));
    EXPECT_EQ(run.exit_code, 0) << run.out;
    json report = json::parse(run.out, nullptr, false);
    ASSERT_TRUE(report.is_object()) << run.out;
    EXPECT_EQ(report["mode"], "open");
    EXPECT_EQ(report["arrival"], "gamma");
    EXPECT_EQ(report["cv"], 4.0);
    ASSERT_EQ(report["steps"].size(), 1u);
    const json& step = report["steps"][0];
    ExpectStepShape(step);
    const int64_t ok = step["ok"].get<int64_t>();
    EXPECT_GT(ok, 0);
    ASSERT_TRUE(step["within_slo"].is_number()) << step.dump();
    if (std::string(slo) == "0.001") {
      EXPECT_EQ(step["within_slo"], 0) << "no reply comes back within 1 us";
      EXPECT_EQ(step["within_slo_per_s"], 0.0);
    } else {
      EXPECT_EQ(step["within_slo"], ok) << "every reply comes back within 60 s";
      EXPECT_NEAR(step["within_slo_per_s"].get<double>(), step["ok_per_s"].get<double>(), 0.2);
    }
  }
  CommandOutput refused = RunCommand(Bench(farm.endpoint(), "--shape 1,256 --arrival poisson"));
  EXPECT_EQ(refused.exit_code, 2) << "--arrival without --rate is a usage error";
  EXPECT_EQ(farm.Stop(), 0);
}

// --client-deadline sends each request's start + --slo-ms as its deadline_unix_us: with 1 us the
// deadline has passed when the farm reads the request, so every request is refused at once
// (DEADLINE_EXCEEDED, counted by code, none run); with 60 s every one is served. Without --slo-ms
// the flag is a usage error.
TEST(BenchSmoke, ClientDeadlinesReachTheFarm) {
  Farm farm(Identity(8));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  const std::string base =
      "--shape 1,256 --rate 300 --arrival poisson --threads 1 --client-deadline ";
  CommandOutput late = RunCommand(Bench(farm.endpoint(), base + "--slo-ms 0.001"));
  EXPECT_EQ(late.exit_code, 1) << "error replies exit 1: " << late.out;
  json report = json::parse(late.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << late.out;
  const json& refused = report["steps"][0];
  EXPECT_EQ(refused["ok"], 0);
  EXPECT_GT(refused["errors"].value("DEADLINE_EXCEEDED", 0), 0) << refused["errors"].dump();
  EXPECT_EQ(refused["error_count"], refused["errors"].value("DEADLINE_EXCEEDED", 0));

  CommandOutput ahead = RunCommand(Bench(farm.endpoint(), base + "--slo-ms 60000"));
  EXPECT_EQ(ahead.exit_code, 0) << ahead.out;
  report = json::parse(ahead.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << ahead.out;
  EXPECT_GT(report["steps"][0]["ok"].get<int64_t>(), 0);
  EXPECT_EQ(report["total_errors"], 0);

  CommandOutput usage =
      RunCommand(Bench(farm.endpoint(), "--shape 1,256 --client-deadline"), /*with_stderr=*/true);
  EXPECT_EQ(usage.exit_code, 2) << usage.out;
  EXPECT_NE(usage.out.find("--client-deadline"), std::string::npos) << usage.out;
  EXPECT_EQ(farm.Stop(), 0);
}

// Issue 32's tenants: --clients 2 --client-rates 20,200 runs two connections (two clients to the
// farm) at 1:10, and the step's counts are the sum of the clients' rows. Bad --client-rates are
// usage errors naming what was expected and what came.
TEST(BenchSmoke, TwoClientsAtOneToTenReportRowsThatAddUp) {
  Farm farm(Identity(8));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  const std::string base = BinDir() + "/torchfarm bench --endpoint " + farm.endpoint() +
                           " --model identity --shape 1,256 --seconds 1 --warmup 0.2 --json ";
  CommandOutput run =
      RunCommand(base + "--clients 2 --client-rates 20,200 --arrival poisson --slo-ms 60000");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  json report = json::parse(run.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << run.out;
  EXPECT_EQ(report["mode"], "open");
  EXPECT_EQ(report["clients"], 2);
  EXPECT_EQ(report["client_rates"], json::array({20.0, 200.0}));
  ASSERT_EQ(report["steps"].size(), 1u);
  const json& step = report["steps"][0];
  ExpectStepShape(step);
  EXPECT_EQ(step["concurrency"], 2);
  EXPECT_EQ(step["target_rate"], 220.0);
  ASSERT_EQ(step["clients"].size(), 2u) << step.dump();
  int64_t sent = 0, ok = 0, errors = 0, within = 0;
  for (const json& client : step["clients"]) {
    for (const char* key : {"client", "target_rate", "sent", "ok", "errors", "error_count",
                            "latency_us", "within_slo", "within_slo_per_s"}) {
      EXPECT_TRUE(client.contains(key)) << key << " missing in " << client.dump();
    }
    EXPECT_LE(client["latency_us"]["p50"].get<double>(), client["latency_us"]["p99"].get<double>());
    sent += client["sent"].get<int64_t>();
    ok += client["ok"].get<int64_t>();
    errors += client["error_count"].get<int64_t>();
    within += client["within_slo"].get<int64_t>();
  }
  EXPECT_EQ(sent, step["sent"].get<int64_t>());
  EXPECT_EQ(ok, step["ok"].get<int64_t>());
  EXPECT_EQ(errors, step["error_count"].get<int64_t>());
  EXPECT_EQ(within, step["within_slo"].get<int64_t>());
  EXPECT_EQ(within, ok) << "every reply comes back within 60 s";
  const int64_t light = step["clients"][0]["sent"].get<int64_t>();
  const int64_t heavy = step["clients"][1]["sent"].get<int64_t>();
  EXPECT_GT(light, 0);
  EXPECT_GT(heavy, 3 * light) << "sent at 1:10 (poisson draws; 1.2 s of each)";

  struct Refusal {
    const char* args;
    const char* message;
  };
  for (const Refusal& bad : {
           Refusal{"--clients 2 --client-rates 20",
                   "--client-rates: expected 2 positive rates in requests/s (one per --clients 2), "
                   "got 1 ('20')"},
           Refusal{"--clients 2 --client-rates 20,0",
                   "--client-rates: expected 2 positive rates in requests/s (one per --clients 2), "
                   "got '0' as rate 2 ('20,0')"},
           Refusal{"--clients 2 --client-rates 20,x", "got 'x' as rate 2 ('20,x')"},
           Refusal{"--clients 2 --client-rates 20,200,5", "got 3 ('20,200,5')"},
           Refusal{"--clients 2", "--clients 2 needs --client-rates with 2 rates"},
           Refusal{"--client-rates 1,2",
                   "--client-rates gives each tenant's rate: it needs "
                   "--clients N"},
           Refusal{"--clients 2 --client-rates 1,2 --rate 5", "drop --rate"},
       }) {
    CommandOutput refused = RunCommand(base + bad.args, /*with_stderr=*/true);
    EXPECT_EQ(refused.exit_code, 2) << bad.args << ": " << refused.out;
    EXPECT_NE(refused.out.find(bad.message), std::string::npos) << bad.args << ": " << refused.out;
  }
  EXPECT_EQ(farm.Stop(), 0);
}

// Client shared-memory regions this farm's supervisor still has in /dev/shm
// ("torchfarm-<pid>-<run>-c<n>-<random>"; its worker segments end in "-w<n>.<m>").
int ClientRegionsOf(pid_t supervisor) {
  const std::string prefix = "torchfarm-" + std::to_string(supervisor) + "-";
  int regions = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.find("-c", prefix.size()) != std::string::npos) {
      ++regions;
    }
  }
  return regions;
}

TEST(BenchSmoke, SharedMemoryRunHasNoErrorsAndReleasesItsRegions) {
  Farm farm(Identity(8));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  CommandOutput run = RunCommand(Bench(farm.endpoint(), "--shape 1,256 --depth 2 --shm"));
  EXPECT_EQ(run.exit_code, 0) << run.out;
  json report = json::parse(run.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << run.out;
  EXPECT_EQ(report["shm"], true);
  // Per client: 2 areas of (1 KiB of input + 1 KiB of output range).
  EXPECT_EQ(report["shm_region_bytes"], 4096);
  EXPECT_EQ(report["total_errors"], 0);
  ASSERT_EQ(report["steps"].size(), 1u);
  const json& step = report["steps"][0];
  ExpectStepShape(step);
  EXPECT_EQ(step["depth"], 2);
  EXPECT_EQ(step["error_count"], 0);
  EXPECT_TRUE(step["errors"].empty()) << step["errors"].dump();
  EXPECT_GT(step["ok"].get<int64_t>(), 0);
  EXPECT_GT(step["reply_mb_per_s"].get<double>(), 0) << "outputs counted where they landed";
  EXPECT_EQ(ClientRegionsOf(farm.pid()), 0) << "regions released at the end of the step";

  // The open loop has no bound on requests in flight, so no area count fits it.
  run = RunCommand(Bench(farm.endpoint(), "--shape 1,256 --shm --rate 100"));
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(BenchSmoke, ErrorRepliesAreCountedByCode) {
  Farm farm(Identity(1));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  CommandOutput run = RunCommand(Bench(farm.endpoint(), "--shape 1,255"));
  EXPECT_EQ(run.exit_code, 1) << "error replies exit 1";
  json report = json::parse(run.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << run.out;
  const json& step = report["steps"][0];
  EXPECT_EQ(step["ok"], 0);
  EXPECT_GT(step["errors"].value("INVALID_ARGUMENT", 0), 0) << step["errors"].dump();
  EXPECT_EQ(step["error_count"], report["total_errors"]);
  EXPECT_EQ(farm.Stop(), 0);  // a SIGKILLed supervisor (the fixture's fallback) leaves its segments
}

TEST(BenchSmoke, EchoServerServesTheSameClientPath) {
  std::string dir = "/tmp/tf-bench-echo-" + std::to_string(::getpid());
  ASSERT_EQ(::system(("mkdir -p " + dir).c_str()), 0);
  std::string endpoint = "ipc://" + dir + "/echo.sock";
  pid_t echo = ::fork();
  if (echo == 0) {
    std::string binary = BinDir() + "/torchfarm";
    ::execl(binary.c_str(), binary.c_str(), "bench", "--echo-server", endpoint.c_str(), nullptr);
    ::_exit(127);
  }
  CommandOutput run =
      RunCommand(Bench(endpoint, "--shape 1,256 --shape 3 --dtype float32 --dtype int64"));
  ::kill(echo, SIGTERM);
  int status = 0;
  ::waitpid(echo, &status, 0);
  ::system(("rm -rf " + dir).c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "echo server stops cleanly on SIGTERM";
  EXPECT_EQ(run.exit_code, 0) << run.out;
  json report = json::parse(run.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << run.out;
  ASSERT_EQ(report["inputs"].size(), 2u);
  const json& step = report["steps"][0];
  ExpectStepShape(step);
  EXPECT_EQ(step["error_count"], 0) << step["errors"].dump();
  EXPECT_GT(step["ok"].get<int64_t>(), 0);
  EXPECT_TRUE(step["mean_batch_size"].is_null()) << "no admin socket given";
  // Both tensors come back: (1*256*4 + 3*8) bytes per reply.
  EXPECT_GT(step["reply_mb_per_s"].get<double>(), 0);
}

}  // namespace
}  // namespace torchfarm::testing
