// Rolling replacement under load (issue 18): a model file rewritten in place under the same path
// and reloaded is rolled out worker by worker with no error, no lost request and never fewer ready
// workers than before; a broken file is rolled back while the old workers keep serving, and
// `torchfarm ctl reload` says so. Each test prints the time from the reload to the last reply of
// the old model and the p99 latency during the rollout against steady state (same run).
#include <sys/wait.h>
#include <torch/script.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "farm_fixture.h"
#include "mlp_weights.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;
using Steady = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr int kClients = 16;
constexpr int kInputs = 8;      // distinct inputs each client cycles through
constexpr int kWidth = 256;     // mlp: [-1, 256] -> [-1, 128]
constexpr int kWorkers = 2;

std::vector<float> Input(int k) {
  std::vector<float> x(kWidth);
  for (int i = 0; i < kWidth; ++i) x[static_cast<size_t>(i)] = 0.01f * static_cast<float>((i * 7 + k * 13) % 97) - 0.4f;
  return x;
}

// The expected output of each input under one model file, computed in this process.
std::vector<std::vector<float>> References(const std::string& path) {
  std::vector<std::vector<float>> out;
  for (int k = 0; k < kInputs; ++k) out.push_back(MlpOutput(path, Input(k)));
  return out;
}

// One reply: when it was sent and answered, and which model answered it.
struct Reply {
  Steady::time_point sent;
  double latency_ms;
  int version;  // 0 old, 1 new, -1 neither (wrong), -2 error
};

// kClients threads sending mlp requests, each reply classified against both references.
class Traffic {
 public:
  Traffic(const std::string& endpoint, std::vector<std::vector<float>> old_ref,
          std::vector<std::vector<float>> new_ref)
      : old_(std::move(old_ref)), new_(std::move(new_ref)) {
    for (int c = 0; c < kClients; ++c) threads_.emplace_back([this, endpoint, c] { Run(endpoint, c); });
  }
  ~Traffic() { Stop(); }
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) if (t.joinable()) t.join();
  }
  std::vector<Reply> replies() {
    std::lock_guard<std::mutex> lock(mutex_);
    return replies_;
  }
  std::string last_error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_error_;
  }

 private:
  void Run(const std::string& endpoint, int c) {
    Client client(endpoint, 30'000);
    for (int n = 0; !stop_; ++n) {
      const int k = (c + n) % kInputs;
      std::vector<float> x = Input(k);
      InferResult result;
      const auto sent = Steady::now();
      Status s = client.Infer("mlp", {{{DType::kFloat32, {1, kWidth}}, x.data(), x.size() * 4}}, &result);
      Reply r{sent, std::chrono::duration<double, std::milli>(Steady::now() - sent).count(), -2};
      if (s.ok() && result.outputs.size() == 1) {
        r.version = NearFloats(result.outputs[0].data, old_[k]) ? 0 : NearFloats(result.outputs[0].data, new_[k]) ? 1 : -1;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (!s.ok()) last_error_ = s.ToString();
      replies_.push_back(r);
    }
  }

  std::vector<std::vector<float>> old_, new_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::vector<Reply> replies_;
  std::string last_error_;
  std::vector<std::thread> threads_;
};

// Ready mlp workers from stats every 50 ms, from construction until Stop.
class ReadySampler {
 public:
  explicit ReadySampler(const Farm& farm) : thread_([this, &farm] {
      while (!stop_) {
        json stats = farm.Admin("stats", 2000);
        if (stats.is_object()) {
          int ready = 0;
          for (const auto& w : stats["workers"]) {
            ready += w["model"] == "mlp" && (w["state"] == "ready" || w["state"] == "busy");
          }
          std::lock_guard<std::mutex> lock(mutex_);
          samples_.push_back(ready);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }) {}
  ~ReadySampler() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::vector<int> samples() {
    std::lock_guard<std::mutex> lock(mutex_);
    return samples_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::vector<int> samples_;
  std::thread thread_;
};

// Runs `torchfarm ctl reload` against the farm; returns its exit code, its output in *out.
int CtlReload(const Farm& farm, std::string* out) {
  const std::string cmd = BinDir() + "/torchfarm ctl --admin ipc://" + farm.dir() +
                          "/run/admin.sock reload 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return -1;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe)) *out += buffer;
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

double P99(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(v.size())))];
}

json MlpAt(const std::string& path, json rollout = nullptr) {
  json m = {{"name", "mlp"},
            {"path", path},
            {"inputs", json::array({{{"dtype", "float32"}, {"shape", {-1, kWidth}}}})},
            {"instances", json::array({{{"count", kWorkers}}})}};
  if (!rollout.is_null()) m["rollout"] = rollout;
  return m;
}

int MinSample(const std::vector<int>& samples) {
  return samples.empty() ? -1 : *std::min_element(samples.begin(), samples.end());
}

// Rolls a rewritten mlp file out under load with `rollout` (null: the documented default); ready
// workers never fall below kWorkers - max_unavailable.
void RollOutUnderLoad(json rollout, int max_unavailable) {
  const std::string dir = "/tmp/tf-rollout-" + std::to_string(::getpid());
  fs::create_directories(dir);
  const std::string path = dir + "/mlp.pt";
  WriteMlp(dir + "/new.pt", 1);
  WriteMlp(path, 0);
  auto old_ref = References(path);
  auto new_ref = References(dir + "/new.pt");
  ASSERT_FALSE(NearFloats(std::string(reinterpret_cast<const char*>(new_ref[0].data()), new_ref[0].size() * 4), old_ref[0]))
      << "seeds 0 and 1 must write different weights";
  Farm farm(json::array({MlpAt(path, rollout)}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();

  ReadySampler sampler(farm);
  Traffic traffic(farm.endpoint(), old_ref, new_ref);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // steady state
  fs::rename(dir + "/new.pt", path);
  const auto reload_at = Steady::now();
  std::string out;
  const int code = CtlReload(farm, &out);
  const auto done_at = Steady::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  traffic.Stop();
  sampler.Stop();
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("done, 2/2 replaced"), std::string::npos) << out;

  std::vector<double> steady, rolling;
  int errors = 0, wrong = 0, old_after = 0, new_replies = 0;
  Steady::time_point last_old{};
  for (const Reply& r : traffic.replies()) {
    errors += r.version == -2;
    wrong += r.version == -1;
    new_replies += r.version == 1;
    if (r.version == 0) last_old = std::max(last_old, r.sent);
    if (r.version == 0 && r.sent > done_at) ++old_after;
    if (r.sent < reload_at) steady.push_back(r.latency_ms);
    if (r.sent >= reload_at && r.sent < done_at) rolling.push_back(r.latency_ms);
  }
  EXPECT_EQ(errors, 0) << traffic.last_error();
  EXPECT_EQ(wrong, 0) << "replies that are neither the old nor the new model's output";
  EXPECT_EQ(old_after, 0) << "the old model answered after the rollout was done";
  EXPECT_GT(new_replies, 0);
  const std::vector<int> samples = sampler.samples();
  EXPECT_GE(MinSample(samples), kWorkers - max_unavailable)
      << "ready workers dropped below the count before less max_unavailable";
  const double to_new_ms = std::chrono::duration<double, std::milli>(last_old - reload_at).count();
  const double reload_ms = std::chrono::duration<double, std::milli>(done_at - reload_at).count();
  std::printf("[rollout %s] %zu replies; reload to last old-model request sent %.0f ms; ctl reload "
              "returned (rollout done) after %.0f ms; p99 steady %.2f ms (n=%zu), during rollout "
              "%.2f ms (n=%zu); ready workers min %d over %zu samples\n",
              rollout.dump().c_str(), traffic.replies().size(), to_new_ms, reload_ms, P99(steady), steady.size(),
              P99(rolling), rolling.size(), MinSample(samples), samples.size());

  json stats = farm.Admin("stats");
  const json& outcome = stats["models"][0]["rollout"];
  EXPECT_EQ(outcome["state"], "done") << outcome.dump();
  EXPECT_EQ(outcome["replaced"], 2) << outcome.dump();
  EXPECT_EQ(farm.Stop(), 0);
  fs::remove_all(dir);
}

TEST(Rollout, AModelFileRewrittenInPlaceRollsOutUnderLoadWithNoErrorAndNoLostCapacity) {
  RollOutUnderLoad(nullptr, 0);
}

// Without room for a surge: one old worker stops, its replacement starts, and so on; still no
// error, and one ready worker fewer at most.
TEST(Rollout, MaxUnavailableWithoutSurgeReplacesInPlaceWithNoError) {
  RollOutUnderLoad({{"max_surge", 0}, {"max_unavailable", 1}}, 1);
}

TEST(Rollout, ABrokenModelFileRollsBackWhileTheOldWorkersKeepServing) {
  const std::string dir = "/tmp/tf-rollback-" + std::to_string(::getpid());
  fs::create_directories(dir);
  const std::string path = dir + "/mlp.pt";
  WriteMlp(path, 0);
  auto old_ref = References(path);
  Farm farm(json::array({MlpAt(path)}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  const std::vector<pid_t> pids = farm.WorkerPids();

  ReadySampler sampler(farm);
  Traffic traffic(farm.endpoint(), old_ref, old_ref);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  {
    std::ofstream garbage(path + ".tmp", std::ios::binary);
    for (int i = 0; i < 4096; ++i) garbage.put(static_cast<char>((i * 131) & 0xFF));
  }
  fs::rename(path + ".tmp", path);
  const auto reload_at = Steady::now();
  std::string out;
  const int code = CtlReload(farm, &out);
  const auto done_at = Steady::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  traffic.Stop();
  sampler.Stop();
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("failed"), std::string::npos) << out;
  EXPECT_NE(out.find("rolled back"), std::string::npos) << out;
  EXPECT_NE(out.find("did not start"), std::string::npos) << "the reason is printed: " << out;

  int errors = 0, not_old = 0;
  std::vector<double> steady, rolling;
  for (const Reply& r : traffic.replies()) {
    errors += r.version == -2;
    not_old += r.version != 0 && r.version != -2;
    if (r.sent < reload_at) steady.push_back(r.latency_ms);
    if (r.sent >= reload_at && r.sent < done_at) rolling.push_back(r.latency_ms);
  }
  EXPECT_EQ(errors, 0) << traffic.last_error();
  EXPECT_EQ(not_old, 0);
  EXPECT_GE(MinSample(sampler.samples()), kWorkers);
  std::printf("[rollback] %zu replies; ctl reload returned (rolled back) after %.0f ms; p99 "
              "steady %.2f ms, during the failed rollout %.2f ms; ctl said:\n%s",
              traffic.replies().size(),
              std::chrono::duration<double, std::milli>(done_at - reload_at).count(),
              P99(steady), P99(rolling), out.c_str());

  json stats = farm.Admin("stats");
  const json& rollout = stats["models"][0]["rollout"];
  EXPECT_EQ(rollout["state"], "failed") << rollout.dump();
  EXPECT_FALSE(rollout["reason"].get<std::string>().empty()) << rollout.dump();
  // The old workers: same processes, no restart counted against them.
  std::vector<pid_t> now;
  for (const auto& w : stats["workers"]) {
    if (w["state"] == "ready" || w["state"] == "busy") {
      now.push_back(w["pid"].get<pid_t>());
      EXPECT_EQ(w["restarts"], 0) << w.dump();
    }
  }
  EXPECT_EQ(now, pids);
  EXPECT_EQ(farm.Stop(), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace torchfarm::testing
