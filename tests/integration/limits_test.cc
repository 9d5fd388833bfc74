// Resource exhaustion never takes the farm down (issue 22): the supervisor under a descriptor
// limit of 256 (as `prlimit --nofile=256`) with 400 idle clients, then the readiness probe, stats,
// a new client, a worker SIGKILL; and the admin commands at and beyond their bounds against the
// real supervisor. Documented defaults throughout.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "farm_fixture.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;
using Ms = std::chrono::milliseconds;

constexpr int kDescriptorLimit = 256;
constexpr int kIdleClients = 400;

json Identity(int count) {
  return {{"name", "identity"},
          {"path", ModelDir() + "/identity.pt"},
          {"inputs", json::array({{{"dtype", "float32"}, {"shape", {-1, 16}}}})},
          {"instances", json::array({{{"count", count}}})}};
}

bool WaitFor(const Farm& farm, const std::function<bool(const json&)>& predicate, int ms = 30'000) {
  const auto deadline = std::chrono::steady_clock::now() + Ms(ms);
  while (std::chrono::steady_clock::now() < deadline) {
    json stats = farm.Admin("stats", 2'000);
    if (stats.is_object() && predicate(stats)) return true;
    std::this_thread::sleep_for(Ms(100));
  }
  return false;
}

// The first answer within `ms` (the admin socket's accept may wait for a free descriptor).
json AdminWithin(const Farm& farm, const json& request, int ms = 20'000) {
  const auto deadline = std::chrono::steady_clock::now() + Ms(ms);
  json reply;
  while (std::chrono::steady_clock::now() < deadline) {
    reply = farm.AdminRequest(request, 2'000);
    if (!reply.is_null()) return reply;
  }
  return reply;
}

std::vector<pid_t> ReadyPids(const json& stats) {
  std::vector<pid_t> pids;
  for (const auto& w : stats["workers"]) {
    if (w["state"] == "ready" || w["state"] == "busy") pids.push_back(w["pid"].get<pid_t>());
  }
  return pids;
}

Status Infer(const std::string& endpoint, int io_timeout_ms) {
  Client client(endpoint, io_timeout_ms);
  std::vector<float> x(16, 1.5f);
  InferResult result;
  return client.Infer("identity", {{{DType::kFloat32, {1, 16}}, x.data(), x.size() * 4}}, &result);
}

// Shared-memory objects of the supervisor `pid` still in /dev/shm.
std::vector<std::string> SegmentsOf(pid_t pid) {
  std::vector<std::string> left;
  const std::string prefix = "torchfarm-" + std::to_string(pid) + "-";
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) left.push_back(name);
  }
  return left;
}

// Idle ZeroMQ clients: connected DEALERs that never send (each costs the supervisor a descriptor
// for as long as it is served).
struct IdleClients {
  IdleClients(const std::string& endpoint, int n) : context(1) {
    context.set(zmq::ctxopt::max_sockets, n + 64);
    for (int i = 0; i < n; ++i) {
      sockets.emplace_back(context, zmq::socket_type::dealer);
      sockets.back().set(zmq::sockopt::linger, 0);
      sockets.back().connect(endpoint);
    }
  }
  void Close() {
    for (auto& s : sockets) s.close();
    sockets.clear();
  }
  zmq::context_t context;
  std::vector<zmq::socket_t> sockets;
};

// The scenario over `transport`: "tcp" (as in production) or "ipc" (the fixture's).
void ExhaustDescriptors(const std::string& transport) {
  // 400 sockets here, each with its own descriptors: more than the usual 1024 soft limit allows.
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = files.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
  ASSERT_GE(files.rlim_cur, rlim_t{3 * kIdleClients})
      << "the test needs descriptors for its clients";

  json extra = {{"heartbeat_ms", nullptr}};
  std::string endpoint;
  int metrics_port = 0;
  if (transport == "tcp") {
    endpoint = "tcp://127.0.0.1:" + std::to_string(FreePort());
    extra["endpoint"] = endpoint;
    // Prometheus too, on TCP: its connections are subject to the descriptor reserve.
    metrics_port = FreePort();
    extra["metrics_endpoint"] = "127.0.0.1:" + std::to_string(metrics_port);
  }
  Farm farm(json::array({Identity(1)}), extra);
  if (endpoint.empty()) endpoint = farm.endpoint();
  farm.set_descriptor_limit(kDescriptorLimit);
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady());
  json stats = farm.Admin("stats");
  ASSERT_TRUE(stats.is_object());
  const json& resources = stats["resources"];
  EXPECT_EQ(resources["descriptor_limit"], kDescriptorLimit);
  const int max_connections = resources["max_connections"].get<int>();
  EXPECT_GT(max_connections, 0);
  EXPECT_LT(max_connections, kDescriptorLimit) << "a reserve is left for workers, segments, admin";
  const std::vector<pid_t> first = ReadyPids(stats);
  ASSERT_EQ(first.size(), 1u);

  IdleClients idle(endpoint, kIdleClients);
  // The idle clients fill max_connections; the rest are refused and counted.
  ASSERT_TRUE(WaitFor(farm, [&](const json& s) {
    return s["resources"]["job_connections"].get<int>() >= max_connections &&
           s["resources"]["refused_connections"].get<int64_t>() > 0;
  })) << farm.Admin("stats").dump();

  // The readiness probe and stats answer.
  json health = AdminWithin(farm, {{"cmd", "health"}});
  ASSERT_TRUE(health.is_object()) << "ctl health got no answer";
  EXPECT_EQ(health["live"], true);
  stats = AdminWithin(farm, {{"cmd", "stats"}});
  ASSERT_TRUE(stats.is_object());
  EXPECT_LE(stats["resources"]["job_connections"].get<int>(), max_connections);
  // A new client is refused while every connection is taken (or served, if one just freed): the
  // supervisor answers or closes, never falls over.
  Status late = Infer(endpoint, 2'000);
  EXPECT_TRUE(farm.Running()) << farm.error() << " after a new client: " << late.ToString();

  // A worker killed while descriptors are short comes back.
  ASSERT_EQ(::kill(first[0], SIGKILL), 0);
  ASSERT_TRUE(WaitFor(
      farm,
      [&](const json& s) {
        const auto pids = ReadyPids(s);
        return pids.size() == 1 && pids[0] != first[0];
      },
      60'000))
      << farm.Admin("stats").dump();
  EXPECT_TRUE(farm.Running()) << farm.error();

  // Once the idle clients leave, new clients are served again.
  idle.Close();
  bool served = false;
  for (int attempt = 0; attempt < 20 && !served; ++attempt) served = Infer(endpoint, 5'000).ok();
  EXPECT_TRUE(served);
  stats = farm.Admin("stats");
  EXPECT_GT(stats["resources"]["refused_connections"].get<int64_t>(), 0);
  for (const auto& w : stats["workers"]) EXPECT_NE(w["state"], "failed") << w.dump();

  if (metrics_port > 0) {
    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + Ms(10'000);
    while (std::chrono::steady_clock::now() < deadline &&
           MetricValue(text, "torchfarm_connections_refused_total{reason=\"max_connections\"}") <=
               0) {
      std::this_thread::sleep_for(Ms(200));
      text = HttpGet(metrics_port, "/metrics");
    }
    EXPECT_GT(MetricValue(text, "torchfarm_connections_refused_total{reason=\"max_connections\"}"),
              0)
        << text;
    EXPECT_EQ(MetricValue(text, "torchfarm_descriptors{kind=\"limit\"}"), kDescriptorLimit);
    EXPECT_EQ(MetricValue(text, "torchfarm_job_connections{kind=\"max\"}"), max_connections);
    EXPECT_GT(MetricValue(text, "torchfarm_shm_bytes"), 0);
    EXPECT_GT(MetricValue(text, "torchfarm_shm_limit_bytes"), 0);
  }

  const pid_t supervisor = farm.pid();
  EXPECT_EQ(farm.Stop(), 0);
  EXPECT_TRUE(SegmentsOf(supervisor).empty())
      << "left in /dev/shm: " << SegmentsOf(supervisor).front();
}

TEST(Limits, DescriptorsRunningOutNeverTakeTheSupervisorDownTcp) { ExhaustDescriptors("tcp"); }

TEST(Limits, DescriptorsRunningOutNeverTakeTheSupervisorDownIpc) { ExhaustDescriptors("ipc"); }

// Every numeric admin command, beyond its bounds, against the real supervisor (the service's
// checks at the bounds themselves are unit-tested in tests/supervisor/admin_service_test.cc).
TEST(Limits, AdminCommandsRefuseNumbersBeyondTheirBounds) {
  Farm farm(json::array({Identity(1)}), {{"heartbeat_ms", nullptr}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady());
  const json beyond[] = {json(-1),        json(int64_t{1} << 31), json(int64_t{1} << 32),
                         json(INT64_MAX), json(UINT64_MAX),       json(2.5),
                         json("1")};
  for (const json& v : beyond) {
    json reply = farm.AdminRequest({{"cmd", "restart"}, {"worker", v}});
    EXPECT_EQ(reply["ok"], false) << v.dump();
    EXPECT_NE(reply.value("error", "").find("restart.worker: expected an integer in 0..2147483647"),
              std::string::npos)
        << reply.dump();
    reply = farm.AdminRequest({{"cmd", "scale"}, {"model", "identity"}, {"count", v}});
    EXPECT_EQ(reply["ok"], false) << v.dump();
    EXPECT_NE(reply.value("error", "").find("scale.count: expected an integer in 0..1024"),
              std::string::npos)
        << reply.dump();
  }
  // `ctl scale MODEL <bound+1>` is refused, and nothing was started.
  json reply = farm.AdminRequest({{"cmd", "scale"}, {"model", "identity"}, {"count", 1025}});
  EXPECT_EQ(reply["error"], "scale.count: expected an integer in 0..1024, got number 1025");
  EXPECT_EQ(farm.Admin("stats")["workers"].size(), 1u);
  // A worker id at the top of its range is a worker that does not exist, not a wrapped one.
  reply = farm.AdminRequest({{"cmd", "restart"}, {"worker", INT32_MAX}});
  EXPECT_EQ(reply["error"], "no worker 2147483647 (see torchfarm stats)");
  EXPECT_TRUE(farm.Running());
  EXPECT_EQ(farm.Stop(), 0);
}

struct ToolRun {
  int exit_code = -1;
  std::string err;
};

// Runs BINARY ARGS (stdin /dev/null), keeping its exit code and stderr; a command that accepted
// its flags and keeps running (top --iterations 0) is stopped after 3 s (exit code 124).
ToolRun RunBinary(const std::string& binary, const std::string& args) {
  const std::string err = ::testing::TempDir() + "/limits_tool.err";
  const std::string command =
      "timeout 3 " + BinDir() + "/" + binary + " " + args + " < /dev/null > /dev/null 2> " + err;
  const int status = std::system(command.c_str());
  ToolRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err);
  run.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return run;
}

struct Flag {
  std::string binary;
  std::string before;  // arguments before the value ("ctl --timeout-ms")
  std::string after;   // and after it ("health --admin ...")
  std::string name;    // as the refusal names it
  int64_t min;
  int64_t max;
};

// Every integer flag at and beyond its bounds: at a bound the flag is taken (the command then
// fails for want of a supervisor, or of a config); beyond it, and at 2^31, 2^32, 2^63-1, 2^64-1
// and -1, the refusal names the flag, its range and the value.
TEST(Limits, EveryIntegerFlagAtAndBeyondItsBounds) {
  const std::string admin = "--admin ipc://" + ::testing::TempDir() + "/no-such-admin.sock";
  const std::string missing = "/nonexistent/torchfarm.json";
  // infer checks that its --input exists before it looks at the numbers; the content is not read.
  const std::string input = ::testing::TempDir() + "/limits_input.npy";
  std::ofstream(input) << "not read";
  const std::vector<Flag> flags = {
      {"torchfarm-supervisor", "--config " + missing + " --drain-timeout-ms", "",
       "--drain-timeout-ms", 0, 86'400'000},
      {"torchfarm", "ctl --timeout-ms", "health " + admin, "--timeout-ms", 1, 3'600'000},
      {"torchfarm", "ctl restart", admin, "worker", 0, 2'147'483'647},
      {"torchfarm", "ctl scale identity", admin, "count", 0, 1024},
      {"torchfarm", "stats --timeout-ms", admin, "--timeout-ms", 1, 3'600'000},
      {"torchfarm", "top --iterations 1 --interval-ms", admin, "--interval-ms", 100, 3'600'000},
      {"torchfarm", "top --iterations", admin, "--iterations", 0, 2'147'483'647},
      {"torchfarm", "top --iterations 1 --timeout-ms", admin, "--timeout-ms", 1, 3'600'000},
      {"torchfarm", "infer --model m --input " + input + " --timeout-ms", "", "--timeout-ms", 0,
       86'400'000},
      {"torchfarm", "infer --model m --input " + input + " --priority", "", "--priority", 0, 1000},
      {"torchfarm", "infer --model m --input " + input + " --io-timeout-ms", "", "--io-timeout-ms",
       1, 86'400'000},
      {"torchfarm", "bench --echo-server ipc:///nonexistent/echo.sock --seconds 0.01 --concurrency",
       "", "--concurrency", 1, 100'000},
      {"torchfarm", "bench --echo-server ipc:///nonexistent/echo.sock --seconds 0.01 --depth", "",
       "--depth", 1, 100'000},
      {"torchfarm", "bench --echo-server ipc:///nonexistent/echo.sock --seconds 0.01 --threads", "",
       "--threads", 0, 100'000},
      {"torchfarm", "bench --echo-server ipc:///nonexistent/echo.sock --seconds 0.01 --io-threads",
       "", "--io-threads", 1, 64},
      {"torchfarm",
       "bench --echo-server ipc:///nonexistent/echo.sock --seconds 0.01 --io-timeout-ms", "",
       "--io-timeout-ms", 1, 86'400'000},
      {"torchfarm", "bench --echo-server ipc:///nonexistent/echo.sock --seconds 0.01 --timeout-ms",
       "", "--timeout-ms", 0, 86'400'000},
  };
  for (const Flag& f : flags) {
    for (int64_t at : {f.min, f.max}) {
      ToolRun run = RunBinary(f.binary, f.before + " " + std::to_string(at) + " " + f.after);
      EXPECT_EQ(run.err.find("expected an integer"), std::string::npos)
          << f.binary << " " << f.before << " " << at << ": " << run.err;
    }
    for (const std::string& beyond :
         {std::to_string(f.min - 1), std::to_string(f.max + 1), std::string("2147483648"),
          std::string("4294967296"), std::string("9223372036854775807"),
          std::string("18446744073709551615"), std::string("-1"), std::string("1.5")}) {
      if (beyond == std::to_string(f.min) || beyond == std::to_string(f.max)) continue;
      ToolRun run = RunBinary(f.binary, f.before + " " + beyond + " " + f.after);
      EXPECT_NE(run.exit_code, 0) << f.binary << " " << f.before << " " << beyond;
      const std::string refusal = "expected an integer in " + std::to_string(f.min) + ".." +
                                  std::to_string(f.max) + ", got '" + beyond + "'";
      EXPECT_NE(run.err.find(refusal), std::string::npos)
          << f.binary << " " << f.before << " " << beyond << ": " << run.err;
      EXPECT_NE(run.err.find(f.name), std::string::npos) << run.err;
    }
  }
  // bench --shape: each dimension whole, never saturated (strtoll would make 2^64 into 2^63-1).
  ToolRun shape = RunBinary("torchfarm", "bench --model m --shape 1,18446744073709551616");
  EXPECT_EQ(shape.exit_code, 2);
  EXPECT_NE(
      shape.err.find("expected an integer in 0..9223372036854775807, got '18446744073709551616'"),
      std::string::npos)
      << shape.err;
}

}  // namespace
}  // namespace torchfarm::testing
