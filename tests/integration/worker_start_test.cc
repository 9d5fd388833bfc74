// How fast a farm gets a worker back, with the real binaries and the documented defaults: a warm
// spare takes a dead worker's place at once, replacement workers fork from one of the two zygotes
// (exec only while both are down; a killed zygote is forked again from the other, issue 27), and
// the adaptive idle poll sleeps when the farm is idle and never holds up a stop (issue 19).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "farm_fixture.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;
using Ms = std::chrono::milliseconds;

// The documented default heartbeat, not the fixture's faster one.
const json kDefaults = {{"heartbeat_ms", nullptr}};

json Identity(json instance) {
  json instances = json::array({std::move(instance)});
  return json::array({ModelEntry("identity", "identity.pt", {-1, 64}, 1,
                                 {{"instances", instances}, {"max_batch_size", 8}})});
}

// Clients sending identity requests back to back until `stop`; every answer is checked.
struct Load {
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, wrong{0}, errors{0}, lost{0};
  std::vector<std::thread> threads;

  void Start(const std::string& endpoint, int clients) {
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([this, endpoint, c] {
        zmq::context_t context(1);
        zmq::socket_t socket(context, zmq::socket_type::dealer);
        socket.set(zmq::sockopt::linger, 0);
        socket.set(zmq::sockopt::rcvtimeo, 30'000);
        socket.connect(endpoint);
        std::mt19937 rng(c);
        for (int64_t n = 0; !stop; ++n) {
          std::vector<float> x(64);
          for (auto& v : x) v = static_cast<float>(rng() % 1000);
          json header = {{"v", 1}, {"id", n}, {"model", "identity"},
                         {"inputs", json::array({{{"dtype", "float32"}, {"shape", {1, 64}}}})}};
          socket.send(zmq::buffer(header.dump()), zmq::send_flags::sndmore);
          socket.send(zmq::buffer(x.data(), x.size() * 4), zmq::send_flags::none);
          zmq::message_t head, data;
          if (!socket.recv(head)) {
            ++lost;
            return;
          }
          if (head.more()) (void)socket.recv(data);
          json reply = json::parse(head.to_string_view());
          if (reply["status"] != "ok") {
            ++errors;
          } else if (reply["id"] == n && data.size() == x.size() * 4 &&
                     std::memcmp(data.data(), x.data(), data.size()) == 0) {
            ++ok;
          } else {
            ++wrong;
          }
        }
      });
    }
  }
  void Stop() {
    stop = true;
    for (auto& t : threads) t.join();
    threads.clear();
  }
};

json Stats(const Farm& farm) { return farm.Admin("stats"); }

// Two clients for 300 ms: some answers, every one right.
void ExpectServesCorrectly(const Farm& farm) {
  Load load;
  load.Start(farm.endpoint(), 2);
  std::this_thread::sleep_for(Ms(300));
  load.Stop();
  EXPECT_GT(load.ok, 0);
  EXPECT_EQ(load.wrong + load.errors + load.lost, 0);
}

json WorkerWithPid(const json& stats, pid_t pid) {
  for (const json& w : stats["workers"]) {
    if (w["pid"] == pid) return w;
  }
  return nullptr;
}

// Waits until `ok(stats)` or timeout; returns the last stats.
template <typename Ok>
json WaitStats(const Farm& farm, Ok&& ok, int timeout_ms = 30'000) {
  json stats;
  for (auto start = std::chrono::steady_clock::now();
       std::chrono::steady_clock::now() - start < Ms(timeout_ms);
       std::this_thread::sleep_for(Ms(20))) {
    stats = Stats(farm);
    if (!stats.is_null() && ok(stats)) return stats;
  }
  return stats;
}

std::vector<pid_t> PidsWithRole(const json& stats, const std::string& role) {
  std::vector<pid_t> pids;
  for (const json& w : stats["workers"]) {
    if (w["role"] == role && w["pid"].get<int>() > 0) pids.push_back(w["pid"].get<pid_t>());
  }
  return pids;
}

// utime + stime of a process, in clock ticks (/proc/PID/stat fields 14 and 15).
int64_t CpuTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t end_of_name = text.rfind(')');
  if (end_of_name == std::string::npos) return -1;
  std::istringstream fields(text.substr(end_of_name + 2));
  std::string field;
  int64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return utime + stime;
}

TEST(WorkerStart, ASpareTakesTheDeadWorkersPlaceAtOnceAndAnswersCorrectly) {
  Farm farm(Identity({{"device", "cpu"}, {"count", 2}, {"spares", 1}}), kDefaults);
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  json stats = WaitStats(farm, [](const json& s) { return s["models"][0]["spares_ready"] == 1; });
  ASSERT_EQ(stats["models"][0]["spares_ready"], 1) << stats.dump();
  EXPECT_EQ(stats["models"][0]["workers"], 2);
  EXPECT_EQ(stats["models"][0]["spares"], 1);
  const std::vector<pid_t> serving = PidsWithRole(stats, "serving");
  const std::vector<pid_t> spares = PidsWithRole(stats, "spare");
  ASSERT_EQ(serving.size(), 2u);
  ASSERT_EQ(spares.size(), 1u);
  EXPECT_EQ(WorkerWithPid(stats, spares[0])["requests"], 0) << "a spare gets no traffic";

  Load load;
  load.Start(farm.endpoint(), 4);
  std::this_thread::sleep_for(Ms(500));
  ASSERT_EQ(::kill(serving[0], SIGKILL), 0);
  // The spare serves in place of the dead worker: same process, no launch.
  stats = WaitStats(farm, [&](const json& s) {
    json w = WorkerWithPid(s, spares[0]);
    return w.is_object() && w["role"] == "serving" && !w["last_promotion_us"].is_null();
  });
  json promoted = WorkerWithPid(stats, spares[0]);
  ASSERT_TRUE(promoted.is_object()) << stats.dump();
  EXPECT_EQ(promoted["role"], "serving") << stats.dump();
  EXPECT_EQ(promoted["promotions"], 1);
  // From the supervisor reaping the dead worker to the first batch it sends the spare: loop work
  // only, no process start or wake-up in between.
  EXPECT_LT(promoted["last_promotion_us"].get<int64_t>(), 20'000) << promoted.dump();
  EXPECT_GE(stats["models"][0]["spare_promotions"], 1);
  std::this_thread::sleep_for(Ms(500));
  load.Stop();
  EXPECT_EQ(load.lost, 0);
  EXPECT_EQ(load.wrong, 0);
  EXPECT_EQ(load.errors, 0);
  stats = Stats(farm);
  EXPECT_GT(WorkerWithPid(stats, spares[0])["requests"].get<int>(), 0) << "the promoted spare served";

  // The dead slot starts again in the background and becomes the new spare.
  stats = WaitStats(farm, [](const json& s) { return s["models"][0]["spares_ready"] == 1; });
  ASSERT_EQ(stats["models"][0]["spares_ready"], 1) << stats.dump();
  const std::vector<pid_t> new_spares = PidsWithRole(stats, "spare");
  ASSERT_EQ(new_spares.size(), 1u);
  EXPECT_NE(new_spares[0], serving[0]);
  EXPECT_NE(new_spares[0], spares[0]);
  EXPECT_EQ(WorkerWithPid(stats, new_spares[0])["start"]["via"], "zygote") << stats.dump();
  EXPECT_EQ(farm.Stop(), 0);
}

// /proc/PID/cmdline as words (NUL-separated, empty ones dropped), /proc/PID/comm, PPid.
std::vector<std::string> CommandLine(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> words;
  for (std::string word; std::getline(in, word, '\0');) {
    if (!word.empty()) words.push_back(word);
  }
  return words;
}

std::string Comm(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

pid_t ParentOf(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("PPid:", 0) == 0) return std::stoi(line.substr(5));
  }
  return -1;
}

const json& Place(const json& stats, const char* role) {
  for (const json& z : stats["supervisor"]["zygote"]["zygotes"]) {
    if (z["role"] == role) return z;
  }
  static const json kNone;
  return kNone;
}

bool BothReady(const json& s) {
  return Place(s, "primary")["state"] == "ready" && Place(s, "standby")["state"] == "ready";
}

TEST(WorkerStart, ZygotesAndForkedWorkersShowWhatTheyAreInPs) {
  Farm farm(Identity({{"device", "cpu"}, {"count", 1}}), kDefaults);
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  json stats = WaitStats(farm, BothReady, 10'000);
  ASSERT_TRUE(BothReady(stats)) << stats.dump();
  const json& primary = Place(stats, "primary");
  const json& standby = Place(stats, "standby");
  EXPECT_EQ(primary["started_by"], "exec");
  EXPECT_EQ(standby["started_by"], "fork") << "the standby forks from the primary";
  EXPECT_EQ(stats["supervisor"]["zygote"]["pid"], primary["pid"]) << "launches go to the primary";
  for (const json* z : {&primary, &standby}) {
    const pid_t pid = (*z)["pid"].get<pid_t>();
    EXPECT_EQ(CommandLine(pid), (std::vector<std::string>{"torchfarm-zygote", "--zygote", "3"}));
    EXPECT_EQ(Comm(pid), "torchfarm-zygot");
    EXPECT_EQ(ParentOf(pid), farm.pid()) << "a forked zygote is the supervisor's child too";
    EXPECT_GT((*z)["rss_bytes"].get<int64_t>(), 0);
  }
  const json worker = stats["workers"][0];
  ASSERT_EQ(worker["start"]["via"], "zygote");
  const pid_t worker_pid = worker["pid"].get<pid_t>();
  EXPECT_EQ(CommandLine(worker_pid), (std::vector<std::string>{"torchfarm-worker", "worker=0"}));
  EXPECT_EQ(Comm(worker_pid), "torchfarm-worke");
  EXPECT_EQ(ParentOf(worker_pid), farm.pid());
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(WorkerStart, ReplacementsForkFromTheOtherZygoteAndExecOnlyWhileBothAreDown) {
  Farm farm(Identity({{"device", "cpu"}, {"count", 1}}), kDefaults);
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  json stats = WaitStats(farm, BothReady, 10'000);
  ASSERT_TRUE(BothReady(stats)) << stats.dump();
  const pid_t primary = Place(stats, "primary")["pid"].get<pid_t>();
  json worker = stats["workers"][0];
  EXPECT_EQ(worker["start"]["via"], "zygote");
  for (const char* phase : {"launch_to_hello_ms", "hello_to_ready_ms", "load_ms", "launch_to_ready_ms"}) {
    EXPECT_TRUE(worker["start"][phase].is_number()) << phase << " " << worker.dump();
  }

  // The primary and the worker at once: the worker forks from the standby, and the primary is
  // forked again from the standby at once (a ready zygote killed from outside: no backoff).
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(primary, SIGKILL), 0);
  ASSERT_EQ(::kill(worker["pid"].get<pid_t>(), SIGKILL), 0);
  stats = WaitStats(farm, [&](const json& s) {
    return s["workers"][0]["state"] == "ready" && s["workers"][0]["pid"] != worker["pid"] &&
           BothReady(s) && Place(s, "primary")["pid"] != primary;
  });
  const auto back_ms =
      std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_EQ(stats["workers"][0]["start"]["via"], "zygote")
      << "the standby forked it: " << stats.dump();
  EXPECT_EQ(Place(stats, "primary")["started_by"], "fork") << stats.dump();
  EXPECT_EQ(Place(stats, "primary")["restarts"], 1);
  EXPECT_EQ(Place(stats, "primary")["last_exit"], "killed by SIGKILL");
  EXPECT_LT(back_ms, 5'000) << "no backoff for a ready zygote killed from outside";

  // Both zygotes and the worker at once: the primary execs, the standby forks from it once it is
  // ready, and the next replacement forks again. The worker's restart (its backoff, ~230 ms at the
  // second restart) races the exec'd primary's start (~230 ms): a worker launched while no zygote
  // is ready execs (the last resort), one launched after forks from the new primary. Either is
  // right; forking from a zygote that was killed is not, and the worker must come back.
  const pid_t zygotes[] = {Place(stats, "primary")["pid"].get<pid_t>(),
                           Place(stats, "standby")["pid"].get<pid_t>()};
  const pid_t second = stats["workers"][0]["pid"].get<pid_t>();
  for (pid_t pid : {zygotes[0], zygotes[1], second}) ASSERT_EQ(::kill(pid, SIGKILL), 0);
  stats = WaitStats(farm, [&](const json& s) {
    return s["workers"][0]["state"] == "ready" && s["workers"][0]["pid"] != second;
  });
  const std::string via = stats["workers"][0]["start"]["via"].get<std::string>();
  EXPECT_TRUE(via == "exec" || via == "zygote") << stats.dump();
  if (via == "zygote") {
    const json& primary_now = Place(stats, "primary");
    EXPECT_NE(primary_now["pid"], zygotes[0]) << "forked from a killed zygote: " << stats.dump();
    EXPECT_EQ(primary_now["started_by"], "exec") << stats.dump();
  }
  stats = WaitStats(farm, [&](const json& s) {
    return BothReady(s) && Place(s, "primary")["pid"] != zygotes[0] &&
           Place(s, "standby")["pid"] != zygotes[1];
  });
  ASSERT_TRUE(BothReady(stats)) << stats.dump();
  EXPECT_EQ(Place(stats, "primary")["started_by"], "exec");
  EXPECT_EQ(Place(stats, "standby")["started_by"], "fork");
  EXPECT_EQ(stats["supervisor"]["zygote"]["restarts"], 3) << stats.dump();
  const pid_t third = stats["workers"][0]["pid"].get<pid_t>();
  ASSERT_EQ(::kill(third, SIGKILL), 0);
  stats = WaitStats(farm, [&](const json& s) {
    return s["workers"][0]["state"] == "ready" && s["workers"][0]["pid"] != third;
  });
  EXPECT_EQ(stats["workers"][0]["start"]["via"], "zygote") << stats.dump();
  ExpectServesCorrectly(farm);
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(WorkerStart, AStoppedZygoteIsGivenUpAndTheWorkerForksFromTheOther) {
  Farm farm(Identity({{"device", "cpu"}, {"count", 1}}), kDefaults);
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  json stats = WaitStats(farm, BothReady, 10'000);
  ASSERT_TRUE(BothReady(stats)) << stats.dump();
  const pid_t zygote = Place(stats, "primary")["pid"].get<pid_t>();
  const pid_t worker = stats["workers"][0]["pid"].get<pid_t>();
  ASSERT_EQ(::kill(zygote, SIGSTOP), 0);  // alive, but never answers
  ASSERT_EQ(::kill(worker, SIGKILL), 0);
  // The launch to the stopped primary times out (DeadlineExceeded: its descriptors may be a
  // worker's), the slot backs off and relaunches, and the standby forks it.
  stats = WaitStats(farm, [&](const json& s) {
    return s["workers"][0]["state"] == "ready" && s["workers"][0]["pid"] != worker;
  });
  EXPECT_EQ(stats["workers"][0]["start"]["via"], "zygote") << stats.dump();
  stats = WaitStats(
      farm, [&](const json& s) { return BothReady(s) && Place(s, "primary")["pid"] != zygote; });
  EXPECT_TRUE(BothReady(stats)) << "the stuck zygote was replaced: " << stats.dump();
  EXPECT_EQ(Place(stats, "primary")["last_exit"], "killed by SIGKILL") << stats.dump();
  ExpectServesCorrectly(farm);
  // Only the relaunched worker runs: a child forked by the stuck zygote, if any, is gone.
  EXPECT_EQ(farm.WorkerPids().size(), 1u);
  ::kill(zygote, SIGCONT);
  EXPECT_EQ(farm.Stop(), 0);
}

// Worker processes whose parent is `supervisor` (by their process name, /proc/PID/comm).
int WorkerChildren(pid_t supervisor) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    n += ParentOf(pid) == supervisor && Comm(pid) == "torchfarm-worke";
  }
  return n;
}

// The launch goes out to a zygote that dies before it answers: the launch fails with
// DeadlineExceeded (its descriptors may be a worker's: no exec with them), the slot relaunches
// with new ones from the other zygote, and the dead one is replaced.
TEST(WorkerStart, AZygoteKilledMidLaunchLeavesOneWorkerForkedFromTheOther) {
  Farm farm(Identity({{"device", "cpu"}, {"count", 1}}), kDefaults);
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  json stats = WaitStats(farm, BothReady, 10'000);
  ASSERT_TRUE(BothReady(stats)) << stats.dump();
  const pid_t zygote = Place(stats, "primary")["pid"].get<pid_t>();
  const pid_t worker = stats["workers"][0]["pid"].get<pid_t>();
  ASSERT_EQ(::kill(zygote, SIGSTOP), 0);  // the relaunch's request waits in its channel...
  ASSERT_EQ(::kill(worker, SIGKILL), 0);
  std::this_thread::sleep_for(Ms(500));   // the slot backs off ~100 ms, then waits up to 1 s
  ASSERT_EQ(::kill(zygote, SIGKILL), 0);  // ...and the zygote dies before it answers
  stats = WaitStats(farm, [&](const json& s) {
    return s["workers"][0]["state"] == "ready" && s["workers"][0]["pid"] != worker &&
           BothReady(s) && Place(s, "primary")["pid"] != zygote;
  });
  EXPECT_EQ(stats["workers"][0]["state"], "ready") << stats.dump();
  EXPECT_EQ(stats["workers"][0]["start"]["via"], "zygote") << stats.dump();
  EXPECT_EQ(Place(stats, "primary")["restarts"], 1) << stats.dump();
  EXPECT_EQ(Place(stats, "primary")["last_exit"], "killed by SIGKILL");
  EXPECT_EQ(WorkerChildren(farm.pid()), 1) << "one worker process, no orphan: " << stats.dump();
  ExpectServesCorrectly(farm);
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(WorkerStart, SparesDoNotKeepAModelWithoutServingWorkersAvailable) {
  Farm farm(Identity({{"device", "cpu"}, {"count", 1}, {"spares", 1}}), kDefaults);
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  json reply = farm.AdminRequest({{"cmd", "scale"}, {"model", "identity"}, {"count", 0}});
  ASSERT_TRUE(reply.value("ok", false)) << reply.dump();
  json stats = WaitStats(farm, [](const json& s) { return s["models"][0]["workers"] == 0; });
  EXPECT_EQ(stats["models"][0]["state"], "unavailable") << stats.dump();
  // A request is refused at once, not queued for a spare that has no place to take.
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, 10'000);
  socket.connect(farm.endpoint());
  std::vector<float> x(64, 1.0f);
  json header = {{"v", 1}, {"id", 1}, {"model", "identity"},
                 {"inputs", json::array({{{"dtype", "float32"}, {"shape", {1, 64}}}})}};
  socket.send(zmq::buffer(header.dump()), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(x.data(), x.size() * 4), zmq::send_flags::none);
  zmq::message_t head;
  ASSERT_TRUE(socket.recv(head)) << "no answer within 10 s (max_queue_wait_ms is 30 s)";
  const json reply_header = json::parse(head.to_string_view());
  EXPECT_EQ(reply_header["status"], "error") << head.to_string();
  EXPECT_EQ(reply_header["code"], "UNAVAILABLE") << head.to_string();
  EXPECT_EQ(farm.Stop(), 0);
}

// Issue 22: a large scale-up never blocks the loop; launches are paced (WorkerPool::
// kMaxLaunchesPerTurn) and the admin socket keeps answering while the workers start.
TEST(WorkerStart, AScaleUpIsPacedAndTheAdminSocketKeepsAnswering) {
  Farm farm(Identity({{"device", "cpu"}, {"count", 1}}), kDefaults);
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  constexpr int kWorkers = 32;
  json reply = farm.AdminRequest({{"cmd", "scale"}, {"model", "identity"}, {"count", kWorkers}});
  ASSERT_TRUE(reply.value("ok", false)) << reply.dump();
  int64_t slowest_us = 0, calls = 0;
  bool all_ready = false;
  for (auto start = std::chrono::steady_clock::now();
       !all_ready && std::chrono::steady_clock::now() - start < Ms(120'000);
       std::this_thread::sleep_for(Ms(20))) {
    const auto sent = std::chrono::steady_clock::now();
    json health = farm.Admin("health", 2'000);
    const int64_t took = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - sent).count();
    ASSERT_TRUE(health.is_object()) << "the admin socket did not answer within 2 s";
    slowest_us = std::max(slowest_us, took);
    ++calls;
    all_ready = health["models"][0]["ready_workers"] == kWorkers;
  }
  EXPECT_TRUE(all_ready) << Stats(farm).dump();
  std::printf("[ measure ] scale 1 -> %d: %lld health calls while workers started, slowest answer "
              "%lld us\n", kWorkers, static_cast<long long>(calls),
              static_cast<long long>(slowest_us));
  reply = farm.AdminRequest({{"cmd", "scale"}, {"model", "identity"}, {"count", 1}});
  ASSERT_TRUE(reply.value("ok", false)) << reply.dump();
  ExpectServesCorrectly(farm);
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(WorkerStart, ExecLaunchStillServes) {
  Farm farm(Identity({{"device", "cpu"}, {"count", 1}}), {{"heartbeat_ms", nullptr}, {"worker_launch", "exec"}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  json stats = Stats(farm);
  EXPECT_EQ(stats["workers"][0]["start"]["via"], "exec");
  EXPECT_EQ(stats["supervisor"]["zygote"]["pid"], -1);
  EXPECT_TRUE(stats["supervisor"]["zygote"]["zygotes"].empty()) << stats.dump();
  ExpectServesCorrectly(farm);
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(WorkerStart, TheAdaptivePollSleepsWhenIdleAndNeverHoldsUpAStop) {
  Farm farm(Identity({{"device", "cpu"}, {"count", 2}}), kDefaults);
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  // Back-to-back requests: the workers poll between them (default idle_spin_us).
  Load load;
  load.Start(farm.endpoint(), 1);
  std::this_thread::sleep_for(Ms(1'000));
  load.Stop();
  EXPECT_GT(load.ok, 0);
  // Idle: the workers sleep. Their CPU time over 5 s is their heartbeats' only (a poll that
  // never ended would cost 5 s).
  std::vector<pid_t> pids = farm.WorkerPids();
  std::vector<int64_t> before;
  for (pid_t p : pids) before.push_back(CpuTicks(p));
  std::this_thread::sleep_for(Ms(5'000));
  const long ticks_per_s = ::sysconf(_SC_CLK_TCK);
  for (size_t i = 0; i < pids.size(); ++i) {
    const int64_t used = CpuTicks(pids[i]) - before[i];
    EXPECT_LE(used, ticks_per_s / 10) << "worker " << pids[i] << " used " << used << " ticks idle";
  }
  // A stop in the middle of back-to-back requests (the clients send nothing after their request
  // in flight): every request answered, the farm exits 0.
  load.Start(farm.endpoint(), 2);
  std::this_thread::sleep_for(Ms(500));
  load.stop = true;
  EXPECT_EQ(farm.Stop(), 0);
  load.Stop();
  EXPECT_EQ(load.wrong + load.lost, 0);
}

}  // namespace
}  // namespace torchfarm::testing
