// The supervisor's MPS handling, without a GPU: the real supervisor and workers, cuda:0 instances
// served on the CPU by fault injection (TORCHFARM_FAULT=fakegpu), and tests/gpu/fake_mps_control.py
// standing in for nvidia-cuda-mps-control. Checks what a user of "gpu": {"mps": …} relies on:
// "required" fails start-up with a clear message, "auto" starts a private daemon, hands its pipe
// directory to GPU workers only and quits it at exit, and a device fault under MPS recycles every
// worker of that GPU without losing a request and without counting as a GPU failure.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "farm_fixture.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;

const std::string kFakeControl =
    std::string(TORCHFARM_SOURCE_DIR) + "/tests/gpu/fake_mps_control.py";

json IdentityModel(const std::string& name, json instances) {
  return {{"name", name},
          {"path", ModelDir() + "/identity.pt"},
          {"inputs", json::array({{{"dtype", "float32"}, {"shape", {-1, 64}}}})},
          {"instances", std::move(instances)}};
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// NAME=VALUE entries of a live process's environment.
std::vector<std::string> EnvironmentOf(pid_t pid) {
  std::string raw = ReadFile("/proc/" + std::to_string(pid) + "/environ");
  std::vector<std::string> entries;
  std::stringstream stream(raw);
  for (std::string item; std::getline(stream, item, '\0');) entries.push_back(item);
  return entries;
}

bool Has(const std::vector<std::string>& entries, const std::string& prefix) {
  for (const auto& e : entries) {
    if (e.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// Sends `count` distinct requests to `model` and checks each reply equals its input.
void ExpectIdentityServes(const Farm& farm, const std::string& model, int count) {
  Client client(farm.endpoint(), 20'000);
  for (int i = 0; i < count; ++i) {
    std::vector<float> data(2 * 64);
    for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<float>(i * 1000 + k);
    TensorView view{{DType::kFloat32, {2, 64}}, data.data(), data.size() * sizeof(float)};
    InferResult result;
    Status status = client.Infer(model, {view}, &result);
    ASSERT_TRUE(status.ok()) << "request " << i << ": " << status.message();
    ASSERT_EQ(result.outputs.size(), 1u);
    ASSERT_EQ(result.outputs[0].data.size(), data.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(result.outputs[0].data.data(), data.data(), data.size() * sizeof(float)),
              0)
        << "request " << i;
  }
}

json WorkerById(const json& stats, int id) {
  for (const auto& w : stats["workers"]) {
    if (w["id"] == id) return w;
  }
  return nullptr;
}

TEST(Mps, RequiredWithoutMpsFailsStartupNamingWhy) {
  Farm farm(
      json::array({IdentityModel("gpu", json::array({{{"device", "cuda:0"}}}))}),
      {{"gpu", {{"mps", "required"}, {"mps_control", "/nonexistent/nvidia-cuda-mps-control"}}}});
  const std::string no_daemon = farm.dir() + "/no-daemon";
  std::filesystem::create_directories(no_daemon);
  ASSERT_TRUE(farm.Start({}, {"CUDA_MPS_PIPE_DIRECTORY=" + no_daemon, "TORCHFARM_FAULT=fakegpu"}));
  EXPECT_FALSE(farm.WaitReady(-1, 20'000));
  const std::string log = ReadFile(farm.dir() + "/supervisor.log");
  // The log line is logfmt: the message's quotes arrive escaped.
  EXPECT_NE(log.find("config.gpu.mps is \\\"required\\\" but MPS cannot run"), std::string::npos)
      << log;
  EXPECT_NE(log.find("/nonexistent/nvidia-cuda-mps-control is not an executable file"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(no_daemon + "/control"), std::string::npos)
      << "names where it looked: " << log;
}

TEST(Mps, AutoWithoutMpsServesByTimeSlicingAndSaysSo) {
  Farm farm(json::array({IdentityModel("gpu", json::array({{{"device", "cuda:0"}}}))}),
            {{"gpu", {{"mps", "auto"}, {"mps_control", "/nonexistent/nvidia-cuda-mps-control"}}}});
  const std::string no_daemon = farm.dir() + "/no-daemon";
  std::filesystem::create_directories(no_daemon);
  ASSERT_TRUE(farm.Start({}, {"CUDA_MPS_PIPE_DIRECTORY=" + no_daemon, "TORCHFARM_FAULT=fakegpu"}));
  ASSERT_TRUE(farm.WaitReady(-1, 30'000)) << farm.error();
  json gpu = farm.Admin("stats")["gpu"];
  EXPECT_EQ(gpu["mps"], "auto");
  EXPECT_NE(gpu["mps_state"].get<std::string>().find("GPU workers time-slice"), std::string::npos)
      << gpu.dump();
  ExpectIdentityServes(farm, "gpu", 5);
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(Mps, AutoStartsAPrivateDaemonForGpuWorkersAndQuitsItAtExit) {
  Farm farm(json::array({IdentityModel("gpu", json::array({{{"device", "cuda:0"}, {"count", 2}}})),
                         IdentityModel("cpu", json::array({{{"device", "cpu"}}}))}),
            {{"gpu",
              {{"mps", "auto"}, {"mps_control", kFakeControl}, {"active_thread_percentage", 50}}}});
  const std::string record = farm.dir() + "/mps-record.txt";
  const std::string no_daemon = farm.dir() + "/no-daemon";
  std::filesystem::create_directories(no_daemon);
  ASSERT_TRUE(farm.Start({}, {"CUDA_MPS_PIPE_DIRECTORY=" + no_daemon, "TORCHFARM_FAULT=fakegpu",
                              "FAKE_MPS_RECORD=" + record}));
  ASSERT_TRUE(farm.WaitReady(-1, 30'000)) << farm.error();
  json stats = farm.Admin("stats");
  const std::string state = stats["gpu"]["mps_state"].get<std::string>();
  EXPECT_EQ(state.rfind("active (daemon started by torchfarm", 0), 0u) << state;
  const std::string pipe = farm.dir() + "/run/mps/pipe";
  EXPECT_NE(state.find(pipe), std::string::npos) << state;
  EXPECT_TRUE(std::filesystem::exists(pipe + "/control"));

  int gpu_workers = 0;
  for (const auto& w : stats["workers"]) {
    const auto env = EnvironmentOf(w["pid"].get<pid_t>());
    if (w["model"] == "gpu") {
      ++gpu_workers;
      EXPECT_TRUE(Has(env, "CUDA_MPS_PIPE_DIRECTORY=" + pipe)) << w.dump();
      EXPECT_TRUE(Has(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50")) << w.dump();
      EXPECT_EQ(w["device"], "cuda:0");
      EXPECT_TRUE(w["device_stats"].is_object()) << w.dump();
    } else {
      EXPECT_FALSE(Has(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="))
          << "CPU workers are no MPS clients";
    }
  }
  EXPECT_EQ(gpu_workers, 2);
  ExpectIdentityServes(farm, "gpu", 10);
  ExpectIdentityServes(farm, "cpu", 3);

  EXPECT_EQ(farm.Stop(), 0);
  const std::string commands = ReadFile(record);
  EXPECT_NE(commands.find("start pipe=" + pipe), std::string::npos) << commands;
  EXPECT_NE(commands.find("command quit pipe=" + pipe), std::string::npos) << commands;
  EXPECT_FALSE(std::filesystem::exists(pipe + "/control")) << "the daemon must be gone";
}

TEST(Mps, DeviceFaultUnderMpsRecyclesEveryWorkerOfThatGpu) {
  Farm farm(json::array({IdentityModel(
                "gpu",
                json::array(
                    {{{"device", "cuda:0"}, {"count", 2}, {"gpu_failures_before_fallback", 3}}}))}),
            {{"gpu", {{"mps", "auto"}, {"mps_control", kFakeControl}}},
             {"restart", {{"initial_backoff_ms", 50}}},
             {"heartbeat_ms", 2000}});  // a loaded 2-core host must not look like a hang
  const std::string no_daemon = farm.dir() + "/no-daemon";
  std::filesystem::create_directories(no_daemon);
  // Worker 0's 3rd batch poisons its (fake) CUDA context.
  ASSERT_TRUE(farm.Start(
      {}, {"CUDA_MPS_PIPE_DIRECTORY=" + no_daemon, "TORCHFARM_FAULT=fakegpu,sticky@3/w0"}));
  ASSERT_TRUE(farm.WaitReady(-1, 30'000)) << farm.error();
  const std::vector<pid_t> before = farm.WorkerPids();
  ASSERT_EQ(before.size(), 2u);
  ExpectIdentityServes(farm, "gpu", 12);  // every request answered, the poisoned batch rerun
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::vector<pid_t> after;
  while (std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(farm.WaitReady(-1, 20'000)) << farm.error();
    after = farm.WorkerPids();
    if (after[0] != before[0] && after[1] != before[1]) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(after[0], before[0]) << "the faulting worker restarts";
  EXPECT_NE(after[1], before[1]) << "its MPS peer on cuda:0 is recycled too";
  json stats = farm.Admin("stats");
  json peer = WorkerById(stats, 1);
  EXPECT_EQ(peer["device"], "cuda:0") << "a recycled peer is no GPU failure: " << peer.dump();
  EXPECT_EQ(peer["fallback"], false);
  EXPECT_NE(peer["last_exit"].get<std::string>().find("MPS server of cuda:0 recovering"),
            std::string::npos)
      << peer.dump();
  EXPECT_EQ(WorkerById(stats, 0)["device"], "cuda:0") << "1 of 3 GPU failures: no fallback yet";
  ExpectIdentityServes(farm, "gpu", 5);
  EXPECT_EQ(farm.Stop(), 0);
}

}  // namespace
}  // namespace torchfarm::testing
