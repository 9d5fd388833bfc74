// Fault tolerance under load, with the real binaries: every accepted request gets exactly one
// answer, and every answer is correct, while workers and the zygotes are SIGKILLed, workers
// SIGSTOPped, poisoned, lose their (fake) GPU, and while the supervisor itself is killed or
// stopped.
#include <ATen/Parallel.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/script.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "farm_fixture.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;
using Ms = std::chrono::milliseconds;

json Model(const std::string& name, const std::string& file, json shape, json extra = json::object()) {
  return ModelEntry(name, file, std::move(shape), 2, std::move(extra));
}

TensorView View(const at::Tensor& t) {
  return TensorView{{DType::kFloat32, t.sizes().vec()}, t.data_ptr(),
                    static_cast<size_t>(t.numel() * 4)};
}

at::Tensor AsTensor(const Tensor& out) {
  return torch::from_blob(const_cast<char*>(out.data.data()), out.spec.shape, at::kFloat).clone();
}

bool ProcessGone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// What the clients send and what each answer must be: a pool of [1, width] float32 inputs and
// the output each must get back, equal within `tolerance` (0: byte for byte).
struct Workload {
  std::string model;
  int64_t width = 0;
  std::vector<std::vector<float>> inputs, expected;
  float tolerance = 0;
};

// The identity model: every answer is its own input, byte for byte.
Workload IdentityWorkload() {
  Workload w{"identity", 64, {}, {}, 0};
  std::mt19937 rng(11);
  for (int i = 0; i < 256; ++i) {
    std::vector<float> x(64);
    for (auto& v : x) v = static_cast<float>(rng() % 1000);
    w.inputs.push_back(x);
    w.expected.push_back(x);
  }
  return w;
}

bool Matches(const std::vector<float>& expected, const zmq::message_t& data, float tolerance) {
  if (data.size() != expected.size() * 4) return false;
  if (tolerance == 0) return std::memcmp(data.data(), expected.data(), data.size()) == 0;
  const float* got = static_cast<const float*>(data.data());
  for (size_t i = 0; i < expected.size(); ++i) {
    if (!(std::fabs(got[i] - expected[i]) <= tolerance)) return false;
  }
  return true;
}

// One DEALER per client thread, one request in flight, replies counted per id so a duplicate
// answer is caught.
struct LoadResult {
  std::atomic<int> sent{0}, ok{0}, wrong{0}, errors{0}, lost{0}, duplicates{0};
  std::mutex mutex;
  std::map<std::string, int> error_codes;  // reply status -> count
  std::string first_error;
};

void RunClients(const std::string& endpoint, int clients, std::atomic<bool>& stop,
                LoadResult& result, const Workload& work) {
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      zmq::context_t context(1);
      zmq::socket_t socket(context, zmq::socket_type::dealer);
      socket.set(zmq::sockopt::linger, 0);
      socket.set(zmq::sockopt::rcvtimeo, 30'000);
      socket.connect(endpoint);
      std::map<int64_t, int> answers;
      std::mt19937 rng(c);
      for (int64_t n = 0; !stop; ++n) {
        int64_t id = c * 1'000'000 + n;
        const size_t pick = rng() % work.inputs.size();
        const std::vector<float>& x = work.inputs[pick];
        json header = {
            {"v", 1},
            {"id", id},
            {"model", work.model},
            {"inputs", json::array({{{"dtype", "float32"}, {"shape", {1, work.width}}}})}};
        socket.send(zmq::buffer(header.dump()), zmq::send_flags::sndmore);
        socket.send(zmq::buffer(x.data(), x.size() * 4), zmq::send_flags::none);
        ++result.sent;
        zmq::message_t head;
        if (!socket.recv(head)) {
          ++result.lost;
          break;
        }
        json reply = json::parse(head.to_string_view());
        zmq::message_t data;
        if (head.more()) (void)socket.recv(data);
        ++answers[reply["id"].get<int64_t>()];
        if (reply["status"] != "ok") {
          ++result.errors;
          std::lock_guard<std::mutex> lock(result.mutex);
          ++result.error_codes[reply["status"].get<std::string>()];
          if (result.first_error.empty()) result.first_error = reply.dump();
        } else if (reply["id"] == id && Matches(work.expected[pick], data, work.tolerance)) {
          ++result.ok;
        } else {
          ++result.wrong;
        }
      }
      // Anything arriving now would be a second answer.
      socket.set(zmq::sockopt::rcvtimeo, 300);
      zmq::message_t extra;
      while (socket.recv(extra)) {
        if (!extra.more()) ++result.duplicates;
      }
      for (auto& [id, count] : answers) result.duplicates += count - 1;
    });
  }
  for (auto& t : threads) t.join();
}

void RunIdentityClients(const std::string& endpoint, int clients, std::atomic<bool>& stop,
                        LoadResult& result) {
  static const Workload identity = IdentityWorkload();
  RunClients(endpoint, clients, stop, result, identity);
}

// Serving workers' pids (warm spares are not what a storm of outside kills aims at).
std::vector<pid_t> ServingPids(const Farm& farm) {
  std::vector<pid_t> pids;
  json stats = farm.Admin("stats");
  if (!stats.is_object()) return pids;
  for (const auto& w : stats["workers"]) {
    if (w["role"] == "serving" && w["pid"].get<int>() > 0) pids.push_back(w["pid"].get<pid_t>());
  }
  return pids;
}

// Every process whose parent is `parent`, from /proc (what `ps --ppid` shows): workers, forked
// or exec'd, and the zygotes.
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line) || line.rfind(')') == std::string::npos) continue;
    // "pid (comm) state ppid ...": the name may hold spaces and parentheses.
    std::istringstream rest(line.substr(line.rfind(')') + 1));
    std::string state;
    pid_t ppid = -1;
    rest >> state >> ppid;
    if (ppid == parent && state != "Z") pids.push_back(std::stoi(name));
  }
  return pids;
}

// /proc/PID/comm without its newline ("" once the process is gone).
std::string Comm(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

// The zygotes' pids from the stats (by name alone, a worker just forked that has not renamed
// itself yet would pass for one).
std::set<pid_t> ZygotePids(const Farm& farm) {
  std::set<pid_t> pids;
  json stats = farm.Admin("stats");
  if (!stats.is_object()) return pids;
  for (const auto& z : stats["supervisor"]["zygote"]["zygotes"]) {
    if (z["pid"].get<int>() > 0 && Comm(z["pid"].get<pid_t>()) == "torchfarm-zygot") {
      pids.insert(z["pid"].get<pid_t>());
    }
  }
  return pids;
}

int ZygoteRestarts(const json& stats) {
  return stats["supervisor"]["zygote"]["restarts"].get<int>();
}

bool BothZygotesReady(const json& stats) {
  if (!stats.is_object()) return false;
  const json& places = stats["supervisor"]["zygote"]["zygotes"];
  return places.size() == 2 && places[0]["state"] == "ready" && places[1]["state"] == "ready";
}

bool WaitBothZygotesReady(const Farm& farm, int timeout_ms) {
  for (auto start = std::chrono::steady_clock::now();
       std::chrono::steady_clock::now() - start < Ms(timeout_ms);
       std::this_thread::sleep_for(Ms(20))) {
    if (BothZygotesReady(farm.Admin("stats"))) return true;
  }
  return false;
}

enum class StormTargets { kServingWorkers, kEveryChild };

// Issue 15, case 1 (and issue 19 with a warm spare): with the DEFAULT restart policy and
// max_retries, a storm of kills from outside (one serving worker SIGKILLed every 200 ms for 10 s,
// 16 clients) never turns the farm off: nothing lost, nothing wrong, errors (requests unlucky
// enough to be on a killed worker more than max_retries times) at most 0.5%, and every worker
// ready again within 10 s of the storm. Prints the storm's throughput against steady state.
// Issue 27: with kEveryChild the kills hit any child of the supervisor (`ps --ppid`), the
// zygotes included; the storm must then keep at least a quarter of the steady throughput (the
// target is half, docs/benchmarks.md has the measured figure; a farm whose zygote is the weak
// point kept 1-7%), and both zygotes are ready again within 10 s.
// The storm's model: its config entry (without batching and instances, which KillStorm sets) and
// what its clients send.
struct StormModel {
  json entry;
  Workload work;
};

StormModel IdentityStormModel() {
  return {Model("identity", "identity.pt", {-1, 64}), IdentityWorkload()};
}

void KillStorm(int spares, StormTargets targets, StormModel model = IdentityStormModel()) {
  json extra = {{"heartbeat_ms", 1000}};  // the documented default (the fixture's is faster)
  json instances = json::array({{{"device", "cpu"}, {"count", 2}, {"spares", spares}}});
  model.entry["max_batch_size"] = 8;
  model.entry["max_queue_delay_us"] = 200;
  model.entry["instances"] = instances;
  Farm farm(json::array({model.entry}), extra);
  const Workload& work = model.work;
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  for (int waited = 0; spares > 0 && waited < 300; ++waited) {
    if (farm.Admin("stats")["models"][0]["spares_ready"] == spares) break;
    std::this_thread::sleep_for(Ms(100));
  }
  ASSERT_TRUE(WaitBothZygotesReady(farm, 10'000)) << farm.Admin("stats").dump();

  // Steady state first, for the throughput ratio.
  LoadResult steady;
  std::atomic<bool> stop{false};
  std::thread load([&] { RunClients(farm.endpoint(), 16, stop, steady, work); });
  std::this_thread::sleep_for(Ms(2000));
  stop = true;
  load.join();
  const double steady_rps = steady.ok / 2.0;

  LoadResult storm;
  stop = false;
  std::thread storm_load([&] { RunClients(farm.endpoint(), 16, stop, storm, work); });
  std::mt19937 rng(7);
  int kills = 0, zygote_kills = 0;
  auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < Ms(10'000)) {
    std::this_thread::sleep_for(Ms(200));
    std::vector<pid_t> alive =
        targets == StormTargets::kServingWorkers ? ServingPids(farm) : ChildrenOf(farm.pid());
    if (alive.empty()) continue;
    const pid_t victim = alive[rng() % alive.size()];
    const bool zygote = ZygotePids(farm).count(victim) > 0;
    if (::kill(victim, SIGKILL) == 0) {
      ++kills;
      zygote_kills += zygote;
    }
  }
  auto storm_end = std::chrono::steady_clock::now();
  const int ok_in_storm = storm.ok.load();
  const bool back = farm.WaitReady(-1, 10'000);
  auto back_ms = std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - storm_end).count();
  const bool zygotes_back = WaitBothZygotesReady(farm, 10'000);
  stop = true;
  storm_load.join();
  const double storm_rps = ok_in_storm / 10.0;

  EXPECT_GE(kills, 10) << "a kill whenever a worker is alive; backoff keeps them away part of the time";
  EXPECT_EQ(storm.lost.load(), 0);
  EXPECT_EQ(storm.wrong.load(), 0);
  EXPECT_EQ(storm.duplicates.load(), 0);
  EXPECT_EQ(storm.ok.load() + storm.errors.load(), storm.sent.load()) << "every request answered";
  EXPECT_LE(storm.errors.load(), storm.sent.load() / 200) << "at most 0.5%: " << storm.first_error;
  for (const auto& [code, count] : storm.error_codes) {
    EXPECT_EQ(code, "INTERNAL") << count << " x " << code << "; first: " << storm.first_error;
  }
  EXPECT_TRUE(back) << "every worker ready within 10 s of the storm: " << farm.Admin("stats").dump();
  EXPECT_TRUE(zygotes_back) << "both zygotes ready within 10 s: " << farm.Admin("stats").dump();
  json stats = farm.Admin("stats");
  int restarts = 0;
  for (const auto& w : stats["workers"]) {
    restarts += w["restarts"].get<int>();
    EXPECT_NE(w["state"], "failed") << w.dump();
  }
  // Every kill is followed by a restart of what it killed. A kill of every child may hit a zygote
  // the stats did not list yet (a standby just forked), counted here as a worker's: so the
  // worker and zygote restarts together are what must add up.
  EXPECT_GE(restarts + (targets == StormTargets::kEveryChild ? ZygoteRestarts(stats) : 0),
            kills - (targets == StormTargets::kEveryChild ? 0 : zygote_kills) - 2)
      << restarts << " worker and " << ZygoteRestarts(stats) << " zygote restarts";
  if (targets == StormTargets::kEveryChild) {
    EXPECT_GE(zygote_kills, 5) << "a random child is a zygote about half the time";
    EXPECT_GE(ZygoteRestarts(stats), zygote_kills) << stats["supervisor"].dump();
    EXPECT_GE(storm_rps / steady_rps, 0.25)
        << "the zygote must not be the single point of slowness";
  }
  const json promotions = stats["models"][0]["spare_promotions"];
  if (spares > 0) EXPECT_GE(promotions.get<int>(), 1) << "the spare stood in";
  std::printf(
      "[ measure ] kill storm (default restart policy, 2 workers + %d spare, kills of %s): "
      "%d kills (%d of zygotes), %d worker restarts, %d zygote restarts, %d promotions, "
      "%d requests ok, %d errors of %d; throughput %.0f req/s vs %.0f steady = %.2f; all "
      "ready %lld ms after the storm (model %s)\n",
      spares, targets == StormTargets::kEveryChild ? "every child" : "serving workers", kills,
      zygote_kills, restarts, ZygoteRestarts(stats), promotions.get<int>(), storm.ok.load(),
      storm.errors.load(), storm.sent.load(), storm_rps, steady_rps, storm_rps / steady_rps,
      static_cast<long long>(back_ms), work.model.c_str());
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(Chaos, KillAWorkerEvery200msFor10sLosesAndDuplicatesNothing) {
  KillStorm(0, StormTargets::kServingWorkers);
}

TEST(Chaos, KillStormWithAWarmSpareLosesNothing) { KillStorm(1, StormTargets::kServingWorkers); }

#ifdef TORCHFARM_PY_MODEL_DIR
// mkmodel's mlp as torch.export wrote it into an AOTInductor package (tools/export_model.py: the
// same weights), and answers computed by the TorchScript mlp: the package is within 4e-7 of it.
StormModel AotiMlpStormModel() {
  const std::string package = std::string(TORCHFARM_PY_MODEL_DIR) + "/mlp.pt2";
  StormModel model{Model("mlp", "mlp.pt", {-1, 256}), Workload{"mlp", 256, {}, {}, 1e-4f}};
  model.entry["path"] = package;
  model.entry["format"] = "aoti";
  torch::jit::Module module = torch::jit::load(ModelDir() + "/mlp.pt");
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::manual_seed(5);
  for (int i = 0; i < 64; ++i) {
    at::Tensor x = torch::randn({1, 256});
    at::Tensor y = module.forward({x}).toTensor().contiguous();
    model.work.inputs.emplace_back(x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
    model.work.expected.emplace_back(y.data_ptr<float>(), y.data_ptr<float>() + y.numel());
  }
  return model;
}

// Folders in `dir` named `prefix`*; with `dead_pid_only`, only torchfarm-worker-<pid> folders
// whose worker is gone.
int CountFolders(const std::string& dir, const std::string& prefix, bool dead_pid_only) {
  int count = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    if (dead_pid_only) {
      const std::string digits = name.substr(prefix.size());
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      if (!ProcessGone(std::stoi(digits))) continue;
    }
    ++count;
  }
  return count;
}

// Issue 29: the same storm on an AOTInductor package: every kill reloads the package's .so in a
// new worker (or a zygote child), and nothing is lost, wrong or duplicated. LibTorch unpacks each
// package into TMPDIR and only a clean exit removes it; each worker's TMPDIR is its own folder
// (worker/private_temp_dir.h), swept by the next worker to start, so ~50 kills leave nothing.
TEST(Chaos, KillStormOnAnAotInductorPackageLosesNothing) {
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string tmp = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
  const int loose_before = CountFolders(tmp, "aotinductor_", false);
  KillStorm(0, StormTargets::kServingWorkers, AotiMlpStormModel());
  EXPECT_EQ(CountFolders(tmp, "aotinductor_", false), loose_before)
      << "no package unpacked straight into " << tmp;
  EXPECT_EQ(CountFolders(tmp, "torchfarm-worker-", true), 0)
      << "no killed worker's scratch folder outlives the farm";
}
#endif

// Issue 27: the same storm over every child of the supervisor, the zygotes included.
TEST(Chaos, KillAnyChildEvery200msFor10sKeepsServing) { KillStorm(0, StormTargets::kEveryChild); }

// Issue 27: only the zygotes, 20 kills in 10 s under 16 clients. Serving never notices; each kill
// is a restart in the stats, both zygotes are back within 10 s, and a worker killed afterwards
// forks from one again.
TEST(Chaos, KillTheZygotes20TimesIn10sUnderLoad) {
  Farm farm(json::array({Model("identity", "identity.pt", {-1, 64}, {{"max_batch_size", 8}})}),
            {{"heartbeat_ms", nullptr}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  ASSERT_TRUE(WaitBothZygotesReady(farm, 10'000)) << farm.Admin("stats").dump();
  LoadResult load;
  std::atomic<bool> stop{false};
  std::thread clients([&] { RunIdentityClients(farm.endpoint(), 16, stop, load); });
  std::mt19937 rng(27);
  int kills = 0;
  for (auto start = std::chrono::steady_clock::now();
       std::chrono::steady_clock::now() - start < Ms(10'000);) {
    std::this_thread::sleep_for(Ms(500));
    const std::set<pid_t> known = ZygotePids(farm);
    const std::vector<pid_t> zygotes(known.begin(), known.end());
    if (!zygotes.empty() && ::kill(zygotes[rng() % zygotes.size()], SIGKILL) == 0) ++kills;
  }
  const bool back = farm.WaitReady(-1, 10'000) && WaitBothZygotesReady(farm, 10'000);
  stop = true;
  clients.join();
  json stats = farm.Admin("stats");
  EXPECT_GE(kills, 18) << "a ready zygote is back within milliseconds of each kill";
  EXPECT_TRUE(back) << stats.dump();
  EXPECT_GE(ZygoteRestarts(stats), kills) << stats["supervisor"].dump();
  EXPECT_EQ(load.lost.load(), 0);
  EXPECT_EQ(load.wrong.load(), 0);
  EXPECT_EQ(load.duplicates.load(), 0);
  EXPECT_EQ(load.ok.load() + load.errors.load(), load.sent.load());
  EXPECT_LE(load.errors.load(), load.sent.load() / 200) << load.first_error;
  // Workers still fork: the replacement of a killed worker comes from a zygote.
  const pid_t worker = stats["workers"][0]["pid"].get<pid_t>();
  ASSERT_EQ(::kill(worker, SIGKILL), 0);
  for (int waited = 0; waited < 200; ++waited) {
    stats = farm.Admin("stats");
    if (stats["workers"][0]["state"] == "ready" && stats["workers"][0]["pid"] != worker) break;
    std::this_thread::sleep_for(Ms(50));
  }
  EXPECT_EQ(stats["workers"][0]["state"], "ready") << stats.dump();
  EXPECT_EQ(stats["workers"][0]["start"]["via"], "zygote") << stats.dump();
  std::printf(
      "[ measure ] %d zygote kills in 10 s: %d zygote restarts, %d requests ok, %d errors "
      "of %d\n",
      kills, ZygoteRestarts(stats), load.ok.load(), load.errors.load(), load.sent.load());
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(Chaos, StoppedWorkerIsDetectedAsHungAndItsJobsCompleteElsewhere) {
  Farm farm(json::array({Model("identity", "identity.pt", {-1, 64})}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  std::vector<pid_t> pids = farm.WorkerPids();
  LoadResult load;
  std::atomic<bool> stop{false};
  std::thread clients([&] { RunIdentityClients(farm.endpoint(), 8, stop, load); });
  std::this_thread::sleep_for(Ms(300));
  auto stopped_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(pids[0], SIGSTOP), 0);
  // heartbeat_ms is 200 in the fixture: 3 missed heartbeats mean a hang.
  json worker;
  while (std::chrono::steady_clock::now() - stopped_at < Ms(10'000)) {
    json stats = farm.Admin("stats");
    if (stats.is_object() && stats["workers"][0]["restarts"].get<int>() >= 1) {
      worker = stats["workers"][0];
      break;
    }
    std::this_thread::sleep_for(Ms(50));
  }
  auto detected_ms = std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - stopped_at).count();
  std::this_thread::sleep_for(Ms(500));
  stop = true;
  clients.join();
  ASSERT_TRUE(worker.is_object()) << "the stopped worker was never replaced";
  EXPECT_NE(worker["last_exit"].get<std::string>().find("no heartbeat"), std::string::npos)
      << worker["last_exit"];
  EXPECT_LT(detected_ms, 3000);
  EXPECT_EQ(load.ok.load(), load.sent.load());
  EXPECT_EQ(load.errors.load() + load.wrong.load() + load.lost.load() + load.duplicates.load(), 0);
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(Chaos, PoisonRequestFailsAloneAndItsBatchMatesSucceed) {
  // slow returns its input after x[:,0].max() units of busy work (~0.04 ms each here).
  Farm farm(json::array({Model("slow", "slow.pt", {-1, 4},
                               {{"max_batch_size", 8}, {"max_queue_delay_us", 200'000},
                                {"preferred_batch_sizes", {8}}, {"hang_timeout_ms", 1000}})}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  std::vector<std::thread> clients;
  std::vector<Status> statuses(8);
  std::vector<bool> correct(8, false);
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&, i] {
      Client client(farm.endpoint(), 60'000);
      at::Tensor x = torch::full({1, 4}, static_cast<float>(i + 1));
      if (i == 3) x[0][0] = 10'000'000.0f;  // minutes of work: the poison
      InferResult result;
      statuses[i] = client.Infer("slow", {View(x)}, &result);
      correct[i] = statuses[i].ok() && torch::equal(AsTensor(result.outputs[0]), x);
    });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < 8; ++i) {
    if (i == 3) {
      EXPECT_EQ(statuses[i].code(), StatusCode::kInternal) << statuses[i].ToString();
      EXPECT_NE(statuses[i].message().find("worker crashed while running this request"), std::string::npos);
      EXPECT_NE(statuses[i].message().find("hang_timeout_ms"), std::string::npos) << statuses[i].message();
    } else {
      EXPECT_TRUE(correct[i]) << "request " << i << ": " << statuses[i].ToString();
    }
  }
  // The farm keeps serving.
  Client client(farm.endpoint(), 20'000);
  at::Tensor x = torch::ones({2, 4});
  InferResult result;
  EXPECT_TRUE(client.Infer("slow", {View(x)}, &result).ok());
  EXPECT_EQ(farm.Stop(), 0);
}

json GpuModel() {
  json m = Model("mlp", "mlp.pt", {-1, 256});
  m["instances"] = json::array({{{"device", "cuda:0"}, {"count", 1}, {"threads", 1}}});
  return m;
}

void ExpectServesMlpCorrectly(const Farm& farm, int requests) {
  torch::jit::Module module = torch::jit::load(ModelDir() + "/mlp.pt");
  at::set_num_threads(1);
  Client client(farm.endpoint(), 30'000);
  for (int i = 0; i < requests; ++i) {
    at::Tensor x = torch::randn({1, 256});
    InferResult result;
    Status s = client.Infer("mlp", {View(x)}, &result);
    ASSERT_TRUE(s.ok()) << "request " << i << ": " << s.ToString();
    c10::InferenceMode guard;
    EXPECT_TRUE(torch::equal(AsTensor(result.outputs[0]), module.forward({x}).toTensor()));
  }
}

TEST(GpuFallback, CudaRequestedWithoutAGpuServesOnCpuAndSaysSo) {
  if (std::filesystem::exists("/dev/nvidia0")) GTEST_SKIP() << "this machine has a GPU";
  Farm farm(json::array({GpuModel()}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady(-1, 30'000)) << farm.error();
  json worker = farm.Admin("stats")["workers"][0];
  EXPECT_EQ(worker["device"], "cpu");
  EXPECT_EQ(worker["fallback"], true);
  const std::string reason = worker["fallback_reason"].get<std::string>();
  EXPECT_TRUE(reason.find("not built with CUDA") != std::string::npos ||
              reason.find("no usable device") != std::string::npos)
      << worker.dump();
  ExpectServesMlpCorrectly(farm, 20);
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(GpuFallback, StickyCudaErrorMovesTheSlotToCpuWithoutLosingTheBatch) {
  Farm farm(json::array({GpuModel()}));
  // The worker serves "cuda:0" on the CPU as if it were a GPU, until batch 3 poisons it.
  ASSERT_TRUE(farm.Start({}, {"TORCHFARM_FAULT=fakegpu,sticky@3"}));
  ASSERT_TRUE(farm.WaitReady(-1, 30'000)) << farm.error();
  EXPECT_EQ(farm.Admin("stats")["workers"][0]["device"], "cuda:0");
  ExpectServesMlpCorrectly(farm, 10);
  json worker = farm.Admin("stats")["workers"][0];
  EXPECT_EQ(worker["device"], "cpu");
  EXPECT_EQ(worker["fallback"], true);
  EXPECT_NE(worker["fallback_reason"].get<std::string>().find("illegal memory access"), std::string::npos)
      << worker.dump();
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(Supervisor, KilledSupervisorTakesItsWorkersAndANewOneStartsClean) {
  auto farm = std::make_unique<Farm>(json::array({Model("identity", "identity.pt", {-1, 64})}));
  ASSERT_TRUE(farm->Start());
  ASSERT_TRUE(farm->WaitReady()) << farm->error();
  pid_t old_pid = farm->pid();
  std::vector<pid_t> workers = farm->WorkerPids();
  ASSERT_EQ(workers.size(), 2u);
  ASSERT_EQ(::kill(old_pid, SIGKILL), 0);
  ASSERT_EQ(::waitpid(old_pid, nullptr, 0), old_pid);
  auto killed_at = std::chrono::steady_clock::now();
  for (pid_t w : workers) {
    while (!ProcessGone(w) && std::chrono::steady_clock::now() - killed_at < Ms(2000)) {
      std::this_thread::sleep_for(Ms(20));
    }
    EXPECT_TRUE(ProcessGone(w)) << "worker " << w << " outlived its supervisor by 2 s";
  }
  // The dead supervisor's segments are still in /dev/shm; a new supervisor removes them.
  std::string prefix = "torchfarm-" + std::to_string(old_pid) + "-";
  auto leftovers = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
      n += e.path().filename().string().rfind(prefix, 0) == 0;
    }
    return n;
  };
  ASSERT_TRUE(farm->Start()) << "same config, same run_dir";
  ASSERT_TRUE(farm->WaitReady()) << farm->error();
  EXPECT_EQ(leftovers(), 0) << "segments of the dead supervisor remain";
  Client client(farm->endpoint(), 10'000);
  at::Tensor x = torch::ones({1, 64});
  InferResult result;
  EXPECT_TRUE(client.Infer("identity", {View(x)}, &result).ok());
  EXPECT_EQ(farm->Stop(), 0);
}

TEST(Supervisor, SigtermUnderLoadAnswersEverythingAndExitsZero) {
  Farm farm(json::array({Model("identity", "identity.pt", {-1, 64})}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  pid_t pid = farm.pid();
  LoadResult load;
  std::atomic<bool> stop{false};
  std::thread clients([&] {
    // Clients see UNAVAILABLE for requests sent after the stop began: that is an answer too.
    std::vector<std::thread> threads;
    for (int c = 0; c < 8; ++c) {
      threads.emplace_back([&] {
        Client client(farm.endpoint(), 2'000);
        at::Tensor x = torch::ones({1, 64});
        while (!stop) {
          InferResult result;
          Status s = client.Infer("identity", {View(x)}, &result);
          ++load.sent;
          if (s.ok()) ++load.ok;
          else if (s.code() == StatusCode::kUnavailable) ++load.errors;
          else if (s.code() == StatusCode::kDeadlineExceeded) { ++load.lost; break; }
          else ++load.wrong;
          if (s.code() == StatusCode::kUnavailable) std::this_thread::sleep_for(Ms(20));
        }
      });
    }
    for (auto& t : threads) t.join();
  });
  std::this_thread::sleep_for(Ms(500));
  int code = farm.Stop();
  stop = true;
  clients.join();
  EXPECT_EQ(code, 0);
  EXPECT_GT(load.ok.load(), 0);
  EXPECT_EQ(load.wrong.load(), 0);
  // Requests in flight at the end may meet a closed socket (no supervisor any more): they were
  // never accepted. Everything accepted was answered: no client waited out its timeout
  // while the supervisor was still alive, which Stop() (returning) proves.
  std::string prefix = "torchfarm-" + std::to_string(pid) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    EXPECT_NE(e.path().filename().string().rfind(prefix, 0), 0u) << e.path();
  }
}

}  // namespace
}  // namespace torchfarm::testing
