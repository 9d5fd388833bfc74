// Model lifecycle at run time (issue 18): `ctl load` of a model absent from the initial config (by
// name from the rewritten config file, and by --config-json), `ctl unload` under 8-client load
// (every request answered with its output or NOT_FOUND, none lost; the workers' processes and
// /dev/shm segments gone afterwards), `ctl models` states, and watch mode
// (model_repository_poll_s) serving a model file rewritten in place without a reload.
#include <signal.h>
#include <sys/wait.h>
#include <torch/script.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
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

constexpr int kWidth = 16;  // identity models: float32 [-1, 16]

// Runs `torchfarm ctl --admin <farm> ARGS`; returns its exit code, stdout and stderr in *out.
int Ctl(const Farm& farm, const std::string& args, std::string* out) {
  const std::string cmd = BinDir() + "/torchfarm ctl --admin ipc://" + farm.dir() +
                          "/run/admin.sock " + args + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return -1;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe)) *out += buffer;
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<float> Input(int k) {
  std::vector<float> x(kWidth);
  for (int i = 0; i < kWidth; ++i) x[static_cast<size_t>(i)] = static_cast<float>(k * 100 + i);
  return x;
}

// One identity request; OK only when the output is the input.
Status InferIdentity(Client& client, const std::string& model, int k) {
  std::vector<float> x = Input(k);
  InferResult result;
  Status s = client.Infer(model, {{{DType::kFloat32, {1, kWidth}}, x.data(), x.size() * 4}}, &result);
  if (!s.ok()) return s;
  if (result.outputs.size() != 1 || result.outputs[0].data.size() != x.size() * 4 ||
      std::memcmp(result.outputs[0].data.data(), x.data(), x.size() * 4) != 0) {
    return Internal("output differs from the input");
  }
  return Status::Ok();
}

json Identity(const std::string& name, int workers = 1) {
  return ModelEntry(name, "identity.pt", {-1, kWidth}, workers);
}

// The entry of `name` in a `models` reply, or null.
json FindModel(const json& reply, const std::string& name) {
  auto models = reply.find("models");
  if (models == reply.end() || !models->is_array()) return nullptr;
  for (const auto& m : *models) {
    if (m.value("name", "") == name) return m;
  }
  return nullptr;
}

TEST(Lifecycle, LoadByNameAndByEntryThenRequestsSucceed) {
  Farm farm(json::array({Identity("keep")}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  Client client(farm.endpoint(), 10'000);
  EXPECT_EQ(InferIdentity(client, "extra", 1).code(), StatusCode::kNotFound);

  // By name: the entry is read from the config file as it is now.
  std::string out;
  EXPECT_EQ(Ctl(farm, "load nope", &out), 1) << out;
  EXPECT_NE(out.find(farm.config_path()), std::string::npos) << out;
  EXPECT_NE(out.find("no entry named 'nope'"), std::string::npos) << out;
  farm.RewriteConfig(json::array({Identity("keep"), Identity("extra", 2)}));
  out.clear();
  ASSERT_EQ(Ctl(farm, "--timeout-ms 60000 load extra", &out), 0) << out;
  EXPECT_NE(out.find("extra: available"), std::string::npos) << out;
  for (int k = 0; k < 5; ++k) EXPECT_TRUE(InferIdentity(client, "extra", k).ok());
  out.clear();
  EXPECT_EQ(Ctl(farm, "load extra", &out), 1) << out;
  EXPECT_NE(out.find("model 'extra' is already loaded; use reload to change it"), std::string::npos)
      << out;

  // By entry: a relative path resolves against the config file's folder.
  json entry = Identity("side");
  entry.erase("name");
  entry["path"] = fs::relative(ModelDir() + "/identity.pt", fs::path(farm.config_path()).parent_path()).string();
  ASSERT_TRUE(fs::path(entry["path"].get<std::string>()).is_relative());
  out.clear();
  ASSERT_EQ(Ctl(farm, "--timeout-ms 60000 load side --config-json '" + entry.dump() + "'", &out), 0)
      << out;
  for (int k = 0; k < 5; ++k) EXPECT_TRUE(InferIdentity(client, "side", k).ok());
  out.clear();
  EXPECT_EQ(Ctl(farm, "load side2 --config-json '{\"path\": 5}'", &out), 1) << out;
  EXPECT_NE(out.find("load.config.path: expected"), std::string::npos) << out;

  // `ctl models`: a table with every model and its state; --json the same as data. `load`
  // answers once the model is available (one worker ready): extra's second worker may still be
  // loading, so the table is read again until it is ready too (or 30 s pass).
  for (int attempt = 0; attempt < 300; ++attempt) {
    out.clear();
    ASSERT_EQ(Ctl(farm, "models", &out), 0) << out;
    if (out.find("2/2") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (const char* name : {"keep", "extra", "side"}) {
    EXPECT_NE(out.find(name), std::string::npos) << out;
  }
  EXPECT_NE(out.find("available"), std::string::npos) << out;
  EXPECT_NE(out.find("2/2"), std::string::npos) << out;
  json models = farm.Admin("models");
  ASSERT_TRUE(FindModel(models, "side").is_object()) << models.dump();
  EXPECT_EQ(FindModel(models, "side").value("state", ""), "available");

  // Loaded without waiting: "loading" until a worker is ready.
  json entry2 = Identity("late");
  json reply = farm.AdminRequest({{"cmd", "load"}, {"model", "late"}, {"config", entry2}});
  ASSERT_TRUE(reply.value("ok", false)) << reply.dump();
  models = farm.Admin("models");
  ASSERT_TRUE(FindModel(models, "late").is_object()) << models.dump();
  EXPECT_EQ(FindModel(models, "late").value("state", ""), "loading") << models.dump();

  // The next reload makes the farm match the file again: "side" and "late" are not in it.
  out.clear();
  ASSERT_EQ(Ctl(farm, "reload", &out), 0) << out;
  EXPECT_EQ(InferIdentity(client, "extra", 3).code(), StatusCode::kOk);
  EXPECT_TRUE(farm.WaitReady()) << farm.error();
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(Lifecycle, BrokenModelLoadReportsTheReason) {
  // A short restart budget so the broken model's workers give up within seconds.
  Farm farm(json::array({Identity("keep")}),
            {{"restart", {{"max_restarts", 1}, {"initial_backoff_ms", 50}}}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  const std::string broken = farm.dir() + "/broken.pt";
  { std::FILE* f = std::fopen(broken.c_str(), "w"); std::fputs("not a model", f); std::fclose(f); }
  json entry = Identity("bad");
  entry["path"] = broken;
  std::string out;
  EXPECT_EQ(Ctl(farm, "--timeout-ms 60000 load bad --config-json '" + entry.dump() + "'", &out), 1)
      << out;
  // Issue 35: a load whose every worker fails is reported and unregistered.
  EXPECT_NE(out.find("loading model 'bad' failed"), std::string::npos) << out;
  EXPECT_NE(out.find("not a ZIP archive"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(Ctl(farm, "health", &out), 0) << "the failed load leaves the farm ready\n" << out;
  Client client(farm.endpoint(), 10'000);
  EXPECT_TRUE(InferIdentity(client, "keep", 1).ok()) << "the other models keep serving";
  EXPECT_EQ(farm.Stop(), 0);
}

// Every /dev/shm name of this supervisor's worker `id` (torchfarm-<pid>-<nonce>-w<id>.<gen>).
std::vector<std::string> WorkerSegments(pid_t supervisor, int id) {
  std::vector<std::string> names;
  const std::string prefix = "torchfarm-" + std::to_string(supervisor) + "-";
  const std::string worker = "-w" + std::to_string(id) + ".";
  for (const auto& e : fs::directory_iterator("/dev/shm")) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.find(worker) != std::string::npos) names.push_back(name);
  }
  return names;
}

TEST(Lifecycle, UnloadUnderLoadLosesNothingAndFreesTheWorkers) {
  Farm farm(json::array({Identity("keep"), Identity("victim", 2)}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  json stats = farm.Admin("stats");
  std::vector<std::pair<int, pid_t>> victims;  // worker id, pid
  for (const auto& w : stats["workers"]) {
    if (w["model"] == "victim") victims.emplace_back(w["id"].get<int>(), w["pid"].get<pid_t>());
  }
  ASSERT_EQ(victims.size(), 2u) << stats.dump();
  for (const auto& [id, pid] : victims) EXPECT_FALSE(WorkerSegments(farm.pid(), id).empty()) << id;

  std::atomic<bool> stop{false};
  std::atomic<Steady::rep> unload_sent{Steady::time_point::max().time_since_epoch().count()};
  std::mutex mutex;
  int ok = 0, not_found = 0, not_found_early = 0, other = 0;
  std::string other_error, not_found_text;
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      Client client(farm.endpoint(), 30'000);
      for (int n = 0; !stop; ++n) {
        const Steady::time_point sent = Steady::now();
        Status s = InferIdentity(client, "victim", c * 1000 + n);
        std::lock_guard<std::mutex> lock(mutex);
        if (s.ok()) {
          ++ok;
        } else if (s.code() == StatusCode::kNotFound) {
          ++not_found;
          not_found_early += sent.time_since_epoch().count() < unload_sent.load();
          not_found_text = s.message();
        } else {
          ++other;
          other_error = s.ToString();
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  unload_sent = Steady::now().time_since_epoch().count();
  std::string out;
  const int code = Ctl(farm, "--timeout-ms 30000 unload victim", &out);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("victim: unloaded"), std::string::npos) << out;
  EXPECT_GT(ok, 0);
  EXPECT_GT(not_found, 0);
  EXPECT_EQ(not_found_early, 0) << "NOT_FOUND for a request sent before the unload";
  EXPECT_EQ(other, 0) << other_error << " (every request gets its output or NOT_FOUND)";
  std::printf("[unload] %d ok, %d NOT_FOUND (last: %s)\n", ok, not_found, not_found_text.c_str());

  // Its workers' processes are gone and their segments unlinked; the other model serves on.
  for (const auto& [id, pid] : victims) {
    EXPECT_EQ(::kill(pid, 0), -1) << "worker " << id << " pid " << pid << " still exists";
    EXPECT_EQ(errno, ESRCH);
    EXPECT_TRUE(WorkerSegments(farm.pid(), id).empty()) << "segments of worker " << id << " remain";
  }
  json models = farm.Admin("models");
  EXPECT_TRUE(FindModel(models, "victim").is_null()) << models.dump();
  Client client(farm.endpoint(), 10'000);
  Status s = InferIdentity(client, "victim", 1);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(InferIdentity(client, "keep", 1).ok());
  out.clear();
  EXPECT_EQ(Ctl(farm, "unload victim", &out), 1) << out;
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(Lifecycle, UnloadingModelAnswersNotFoundWithItsState) {
  // A slow model keeps the unload draining long enough to see "unloading" and its NOT_FOUND.
  json slow = ModelEntry("slow", "slow.pt", {-1, 4}, 1);
  Farm farm(json::array({Identity("keep"), slow}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  std::thread busy([&] {
    Client client(farm.endpoint(), 30'000);
    std::vector<float> x = {30'000.0f, 0, 0, 0};  // ~30000 work units: a second or more
    InferResult result;
    EXPECT_TRUE(client.Infer("slow", {{{DType::kFloat32, {1, 4}}, x.data(), 16}}, &result).ok())
        << "a request running when the unload began finishes";
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // No ASSERT before busy.join(): a std::thread must be joined on every path.
  json reply = farm.AdminRequest({{"cmd", "unload"}, {"model", "slow"}});
  EXPECT_TRUE(reply.value("ok", false)) << reply.dump();
  json models = farm.Admin("models");
  EXPECT_EQ(FindModel(models, "slow").value("state", ""), "unloading") << models.dump();
  Client client(farm.endpoint(), 10'000);
  std::vector<float> x(4, 1.0f);
  InferResult result;
  Status s = client.Infer("slow", {{{DType::kFloat32, {1, 4}}, x.data(), 16}}, &result);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "model 'slow' is being unloaded") << s.ToString();
  busy.join();
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(Lifecycle, WatchModeServesAFileRewrittenInPlaceWithoutReload) {
  const std::string dir = "/tmp/tf-watch-" + std::to_string(::getpid());
  fs::create_directories(dir);
  const std::string path = dir + "/mlp.pt";
  WriteMlp(dir + "/new.pt", 1);
  WriteMlp(path, 0);
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i % 50) - 0.2f;
  const std::vector<float> old_out = MlpOutput(path, x), new_out = MlpOutput(dir + "/new.pt", x);
  json mlp = {{"name", "mlp"},
              {"path", path},
              {"inputs", json::array({{{"dtype", "float32"}, {"shape", {-1, 256}}}})},
              {"instances", json::array({{{"device", "cpu"}, {"count", 1}}})}};
  Farm farm(json::array({mlp}), {{"model_repository_poll_s", 1}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  Client client(farm.endpoint(), 10'000);
  auto infer = [&](std::string* bytes) {
    InferResult result;
    Status s = client.Infer("mlp", {{{DType::kFloat32, {1, 256}}, x.data(), x.size() * 4}}, &result);
    if (s.ok() && result.outputs.size() == 1) *bytes = result.outputs[0].data;
    return s;
  };
  std::string bytes;
  ASSERT_TRUE(infer(&bytes).ok());
  ASSERT_TRUE(NearFloats(bytes, old_out));
  ASSERT_FALSE(NearFloats(bytes, new_out)) << "seeds 0 and 1 must write different weights";

  fs::rename(dir + "/new.pt", path);  // no reload called
  const auto deadline = Steady::now() + std::chrono::seconds(60);
  bool switched = false;
  int errors = 0;
  while (!switched && Steady::now() < deadline) {
    errors += !infer(&bytes).ok();
    switched = NearFloats(bytes, new_out);
    if (!switched) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(switched) << "the rewritten file was not served within 60 s";
  EXPECT_EQ(errors, 0);
  json stats = farm.Admin("stats");
  EXPECT_EQ(stats["models"][0]["rollout"]["state"], "done") << stats.dump();
  EXPECT_EQ(farm.Stop(), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace torchfarm::testing
