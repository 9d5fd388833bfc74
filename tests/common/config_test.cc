#include "config_test_support.h"
#include "common/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <random>

namespace torchfarm {
namespace {

using ::torchfarm::testing::MinimalConfig;
using ::torchfarm::testing::ParseError;

using nlohmann::json;
using ::testing::HasSubstr;

TEST(ConfigTest, MinimalConfigGetsDefaults) {
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(MinimalConfig(), "/base", &c).ok());
  EXPECT_EQ(c.endpoint, "tcp://127.0.0.1:5555");
  EXPECT_EQ(c.run_dir, "/tmp/torchfarm");
  EXPECT_EQ(c.admin_endpoint, "ipc:///tmp/torchfarm/admin.sock");
  EXPECT_EQ(c.heartbeat_ms, 1000);
  EXPECT_EQ(c.worker_binary, "");
  ASSERT_EQ(c.models.size(), 1u);
  const ModelConfig& m = c.models[0];
  EXPECT_EQ(m.name, "m");
  EXPECT_EQ(m.path, "/base/m.pt");
  ASSERT_EQ(m.inputs.size(), 1u);
  EXPECT_EQ(m.inputs[0], (TensorSpec{DType::kFloat32, {-1, 4}}));
  ASSERT_EQ(m.instances.size(), 1u);
  EXPECT_EQ(m.instances[0].device, "cpu");
  EXPECT_EQ(m.instances[0].count, 1);
  EXPECT_FALSE(m.instances[0].count_auto);
  EXPECT_EQ(m.instances[0].threads, 1);
  EXPECT_TRUE(m.instances[0].cores.empty());
  EXPECT_EQ(m.max_batch_size, 1);
  EXPECT_EQ(m.max_queue_delay_us, 0);
  EXPECT_TRUE(m.preferred_batch_sizes.empty());
  EXPECT_EQ(m.max_queue_size, 1024);
  EXPECT_EQ(m.max_inflight_per_worker, 2);
  EXPECT_EQ(m.priority_levels, 1);
  EXPECT_EQ(m.default_priority_level, 1);
  EXPECT_TRUE(m.fair_queueing);
  EXPECT_EQ(c.limits.max_unread_replies_per_client, 256);
  EXPECT_EQ(c.limits.max_unread_reply_bytes_per_client, int64_t{64} << 20);
  EXPECT_EQ(m.slot_bytes, uint64_t{4} << 20);
  EXPECT_EQ(m.ring_slots, 4);
}

// Triton's default_priority_level (docs/kserve-v2.md, "Priority"): 1..priority_levels.
TEST(ConfigTest, DefaultPriorityLevelIsWithinThePriorityLevels) {
  json j = MinimalConfig();
  j["models"][0]["priority_levels"] = 4;
  j["models"][0]["default_priority_level"] = 3;
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  EXPECT_EQ(c.models[0].default_priority_level, 3);
  j["models"][0]["default_priority_level"] = 5;
  EXPECT_THAT(ParseError(j), HasSubstr("default_priority_level: expected 1..4 (priority_levels), "
                                       "got 5"));
  j["models"][0]["default_priority_level"] = 0;
  EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].default_priority_level"));
  j["models"][0]["default_priority_level"] = "high";
  EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].default_priority_level"));
}

TEST(ConfigTest, ExplicitValuesAreRead) {
  json j = MinimalConfig();
  j["endpoint"] = "tcp://0.0.0.0:6000";
  j["insecure"] = true;  // a network endpoint without CURVE (security_config_test.cc)
  j["heartbeat_ms"] = 250;
  j["models"][0]["max_batch_size"] = 16;
  j["models"][0]["preferred_batch_sizes"] = {8, 4, 16};
  j["models"][0]["max_inflight_per_worker"] = 8;
  j["models"][0]["instances"] =
      json::parse(R"([{"device": "cuda:1", "count": 2, "threads": 3, "cores": [0, 2]}])");
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  EXPECT_EQ(c.endpoint, "tcp://0.0.0.0:6000");
  EXPECT_EQ(c.heartbeat_ms, 250);
  const ModelConfig& m = c.models[0];
  EXPECT_EQ(m.max_batch_size, 16);
  EXPECT_EQ(m.preferred_batch_sizes, (std::vector<int64_t>{4, 8, 16}));
  EXPECT_EQ(m.ring_slots, 8);  // defaults to max(4, max_inflight_per_worker)
  EXPECT_EQ(m.instances[0].device, "cuda:1");
  EXPECT_EQ(m.instances[0].count, 2);
  EXPECT_EQ(m.instances[0].threads, 3);
  EXPECT_EQ(m.instances[0].cores, (std::vector<int>{0, 2}));
}

TEST(ConfigTest, RelativePathsResolveAgainstBaseDir) {
  json j = MinimalConfig();
  j["run_dir"] = "run";
  j["models"][0]["path"] = "../models/./m.pt";
  j["models"].push_back(MinimalConfig()["models"][0]);
  j["models"][1]["name"] = "abs";
  j["models"][1]["path"] = "/opt/m.pt";
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(j, "/etc/tf", &c).ok());
  EXPECT_EQ(c.run_dir, "/etc/tf/run");
  EXPECT_EQ(c.admin_endpoint, "ipc:///etc/tf/run/admin.sock");
  EXPECT_EQ(c.models[0].path, "/etc/models/m.pt");
  EXPECT_EQ(c.models[1].path, "/opt/m.pt");
}

TEST(ConfigTest, FormatIsAutoTorchscriptOrAoti) {
  json j = MinimalConfig();
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  EXPECT_EQ(c.models[0].format, "auto");
  for (const char* format : {"auto", "torchscript", "aoti"}) {
    j["models"][0]["format"] = format;
    ASSERT_TRUE(ParseConfig(j, "/base", &c).ok()) << format;
    EXPECT_EQ(c.models[0].format, format);
  }
  j["models"][0]["format"] = "onnx";
  EXPECT_EQ(
      ParseError(j),
      "config.models[0].format: expected \"auto\", \"torchscript\" or \"aoti\", got \"onnx\"");
  for (json wrong : {json(1), json(true), json(nullptr), json::array()}) {
    j["models"][0]["format"] = wrong;
    EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].format")) << wrong.dump();
  }
}

TEST(ConfigTest, OptimizeIsNoneFreezeOrInferenceForTorchScriptOnly) {
  json j = MinimalConfig();
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  EXPECT_EQ(c.models[0].optimize, "none");
  for (const char* optimize : {"none", "freeze", "inference"}) {
    j["models"][0]["optimize"] = optimize;
    ASSERT_TRUE(ParseConfig(j, "/base", &c).ok()) << optimize;
    EXPECT_EQ(c.models[0].optimize, optimize);
  }
  j["models"][0]["optimize"] = "fast";
  EXPECT_EQ(ParseError(j),
            "config.models[0].optimize: expected \"none\", \"freeze\" or \"inference\", got "
            "\"fast\"");
  for (json wrong : {json(1), json(true), json(nullptr), json::array()}) {
    j["models"][0]["optimize"] = wrong;
    EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].optimize")) << wrong.dump();
  }
  // An AOTInductor package, by its format or by "auto" and its .pt2 path, is compiled already.
  j["models"][0]["optimize"] = "freeze";
  j["models"][0]["format"] = "aoti";
  EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].optimize: \"freeze\" applies to "
                                       "TorchScript models"));
  j["models"][0]["format"] = "auto";
  j["models"][0]["path"] = "m.pt2";
  EXPECT_THAT(ParseError(j), HasSubstr("this entry's model is an AOTInductor package (format "
                                       "\"auto\", path \"/base/m.pt2\")"));
  j["models"][0]["format"] = "torchscript";  // a .pt2 name the user says is TorchScript
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  j["models"][0]["format"] = "aoti";
  j["models"][0]["optimize"] = "none";
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());

  // Each version's own file counts: a .pt2 version under a TorchScript entry path is refused,
  // naming the version; a .pt2 entry path that every version overrides is not.
  j["models"][0]["format"] = "auto";
  j["models"][0]["optimize"] = "inference";
  j["models"][0]["path"] = "m.pt";
  j["models"][0]["versions"] =
      json::array({{{"version", "1"}}, {{"version", "2"}, {"path", "m2.pt2"}}});
  EXPECT_EQ(ParseError(j),
            "config.models[0].optimize: \"inference\" applies to TorchScript models, and version "
            "\"2\" of this entry is an AOTInductor package (format \"auto\", path "
            "\"/base/m2.pt2\"), compiled already: use \"none\"");
  j["models"][0]["version_policy"] = json{{"specific", {"1"}}};  // listed, even if not loaded
  EXPECT_THAT(ParseError(j), HasSubstr("version \"2\" of this entry"));
  j["models"][0].erase("version_policy");
  j["models"][0]["path"] = "m.pt2";
  j["models"][0]["versions"] =
      json::array({{{"version", "1"}, {"path", "a.pt"}}, {{"version", "2"}, {"path", "b.pt"}}});
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  ASSERT_EQ(c.models.size(), 1u);  // the latest version only, by default
  EXPECT_EQ(c.models[0].optimize, "inference");
}

TEST(ConfigTest, FairQueueingIsABoolean) {
  json j = MinimalConfig();
  j["models"][0]["fair_queueing"] = false;
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  EXPECT_FALSE(c.models[0].fair_queueing);
  for (json wrong : {json(1), json("true"), json(nullptr), json::array()}) {
    j["models"][0]["fair_queueing"] = wrong;
    EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].fair_queueing")) << wrong.dump();
  }
}

TEST(ConfigTest, UnknownKeyAtEachLevelNamesKeyAndPath) {
  json j = MinimalConfig();
  j["workers"] = 3;
  EXPECT_THAT(ParseError(j), HasSubstr("config: unknown key 'workers'"));
  j = MinimalConfig();
  j["models"][0]["batch"] = 3;
  EXPECT_THAT(ParseError(j), HasSubstr("config.models[0]: unknown key 'batch'"));
  j = MinimalConfig();
  j["models"][0]["instances"] = json::parse(R"([{"device": "cpu"}, {"gpu": 1}])");
  EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].instances[1]: unknown key 'gpu'"));
  j = MinimalConfig();
  j["models"][0]["inputs"][0]["layout"] = "nchw";
  EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].inputs[0]: unknown key 'layout'"));
}

TEST(ConfigTest, AModelTakesAtMostTheInputsARequestCarries) {
  json j = MinimalConfig();
  j["models"][0]["inputs"] = json::array();
  for (int i = 0; i < 17; ++i) {
    j["models"][0]["inputs"].push_back({{"dtype", "uint8"}, {"shape", {1}}});
  }
  EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].inputs: 17 inputs, at most 16"));
  j["models"][0]["inputs"].erase(16);
  FarmConfig c;
  EXPECT_TRUE(ParseConfig(j, "/base", &c).ok());
}

TEST(ConfigTest, WrongTypesNamePathExpectedAndReceived) {
  json j = MinimalConfig();
  j["endpoint"] = 5;
  EXPECT_EQ(ParseError(j), "config.endpoint: expected a non-empty string, got number 5");
  j = MinimalConfig();
  j["heartbeat_ms"] = "fast";
  EXPECT_EQ(ParseError(j),
            "config.heartbeat_ms: expected an integer in 10..600000, got string \"fast\"");
  j = MinimalConfig();
  j["models"][0]["max_batch_size"] = 0;
  EXPECT_THAT(ParseError(j),
              HasSubstr("config.models[0].max_batch_size: expected an integer in 1.."));
  j = MinimalConfig();
  j["models"][0]["instances"] = json::parse(R"([{"count": 2.5}])");
  EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].instances[0].count: expected an integer"));
  EXPECT_THAT(ParseError(j), HasSubstr("or \"auto\""));
  j = MinimalConfig();
  j["models"][0]["instances"] = "two";
  EXPECT_EQ(ParseError(j), "config.models[0].instances: expected an array");
  j = MinimalConfig();
  j["models"] = json::object();
  EXPECT_EQ(ParseError(j),
            "config.models: expected a non-empty array of models (or a \"model_repository\")");
  j = MinimalConfig();
  j["models"][0].erase("path");
  EXPECT_EQ(ParseError(j), "config.models[0].path: required string is missing");
  EXPECT_EQ(ParseError(json::array()), "config: expected a JSON object, got array []");
}

TEST(ConfigTest, DuplicateModelNamesAreRejected) {
  json j = MinimalConfig();
  j["models"].push_back(j["models"][0]);
  EXPECT_EQ(ParseError(j),
            "config.models[1].name: model \"m\" is declared twice (list its "
            "versions in one entry's \"versions\")");
}

TEST(ConfigTest, CountAutoResolvesAgainstCores) {
  json j = MinimalConfig();
  j["models"][0]["instances"] = json::parse(R"([{"count": "auto", "threads": 2}])");
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  const InstanceConfig& inst = c.models[0].instances[0];
  EXPECT_TRUE(inst.count_auto);
  EXPECT_EQ(ResolveInstanceCount(inst, 8), 4);
  EXPECT_EQ(ResolveInstanceCount(inst, 1), 1);  // never zero workers
  InstanceConfig fixed;
  fixed.count = 3;
  EXPECT_EQ(ResolveInstanceCount(fixed, 64), 3);
  j["models"][0]["instances"][0]["count"] = "many";
  EXPECT_THAT(ParseError(j), HasSubstr("or \"auto\""));
}

TEST(ConfigTest, InvalidDeviceStringsAreRejected) {
  for (const char* device : {"gpu", "cuda:", "cuda:x", "CUDA:0", "cuda0", "cuda:-1"}) {
    json j = MinimalConfig();
    j["models"][0]["instances"] = json::array({{{"device", device}}});
    EXPECT_EQ(ParseError(j), std::string("config.models[0].instances[0].device: expected \"cpu\" "
                                         "or \"cuda:N\", got \"") +
                                 device + "\"");
  }
  json j = MinimalConfig();
  j["models"][0]["instances"] = json::array({{{"device", "cuda:12"}}});
  FarmConfig c;
  EXPECT_TRUE(ParseConfig(j, "/base", &c).ok());
}

// "rollout": {max_surge, max_unavailable}, each 0..64, not both 0; defaults 1 and 0.
TEST(ConfigTest, RolloutLimitsAreReadAndChecked) {
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(MinimalConfig(), "/base", &c).ok());
  EXPECT_EQ(c.models[0].rollout.max_surge, 1);
  EXPECT_EQ(c.models[0].rollout.max_unavailable, 0);
  json j = MinimalConfig();
  for (int surge : {0, 1, 64}) {
    for (int unavailable : {0, 1, 64}) {
      j["models"][0]["rollout"] = {{"max_surge", surge}, {"max_unavailable", unavailable}};
      if (surge == 0 && unavailable == 0) {
        EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].rollout: max_surge and "
                                             "max_unavailable are both 0"));
        continue;
      }
      ASSERT_TRUE(ParseConfig(j, "/base", &c).ok()) << j.dump();
      EXPECT_EQ(c.models[0].rollout.max_surge, surge);
      EXPECT_EQ(c.models[0].rollout.max_unavailable, unavailable);
    }
  }
  j["models"][0]["rollout"] = {{"max_surge", 65}};
  EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].rollout.max_surge"));
  j["models"][0]["rollout"] = {{"max_unavailable", -1}};
  EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].rollout.max_unavailable"));
  j["models"][0]["rollout"] = {{"surge", 1}};
  EXPECT_THAT(ParseError(j), HasSubstr("surge"));
  j["models"][0]["rollout"] = 1;
  EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].rollout: expected an object"));
}

TEST(ConfigTest, RingSlotsBelowMaxInflightIsRejected) {
  json j = MinimalConfig();
  j["models"][0]["max_inflight_per_worker"] = 4;
  j["models"][0]["ring_slots"] = 2;
  EXPECT_EQ(ParseError(j), "config.models[0].ring_slots: 2 is less than max_inflight_per_worker 4");
  j["models"][0]["ring_slots"] = 4;
  FarmConfig c;
  EXPECT_TRUE(ParseConfig(j, "/base", &c).ok());
}

TEST(ConfigTest, OtherCrossFieldChecks) {
  json j = MinimalConfig();
  j["admin_endpoint"] = j.value("endpoint", "tcp://127.0.0.1:5555");
  EXPECT_THAT(ParseError(j), HasSubstr("config.admin_endpoint: must differ from endpoint"));
  j = MinimalConfig();
  j["models"][0]["max_batch_size"] = 4;
  j["models"][0]["preferred_batch_sizes"] = {2, 8};
  EXPECT_THAT(ParseError(j), HasSubstr("expected integers in 1..4 (max_batch_size), got number 8"));
  j = MinimalConfig();
  j["models"][0]["name"] = "bad name";
  EXPECT_THAT(ParseError(j), HasSubstr("config.models[0].name: expected letters"));
}

TEST(ConfigTest, GpuInstanceKeysAndMpsAreRead) {
  json j = MinimalConfig();
  j["gpu"] = {{"mps", "required"}, {"active_thread_percentage", 40}};
  j["models"][0]["max_inflight_per_worker"] = 3;
  j["models"][0]["instances"] = json::parse(R"([
      {"device": "cuda:0", "count": 4, "precision": "fp16", "streams": 3, "cudnn_benchmark": true,
       "pin_memory": false},
      {"device": "cpu", "precision": "bf16", "idle_spin_us": 250}])");
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  EXPECT_EQ(c.gpu.mps, "required");
  EXPECT_EQ(c.gpu.active_thread_percentage, 40);
  EXPECT_EQ(c.gpu.mps_control, "nvidia-cuda-mps-control");
  const InstanceConfig& gpu = c.models[0].instances[0];
  EXPECT_TRUE(gpu.is_gpu());
  EXPECT_EQ(gpu.precision, "fp16");
  EXPECT_EQ(gpu.streams, 3);
  EXPECT_TRUE(gpu.cudnn_benchmark);
  EXPECT_FALSE(gpu.pin_memory);
  EXPECT_EQ(c.models[0].instances[1].precision, "bf16");
  EXPECT_EQ(c.models[0].instances[1].idle_spin_us, 250);
  EXPECT_FALSE(c.models[0].instances[1].is_gpu());

  FarmConfig defaults;
  ASSERT_TRUE(ParseConfig(MinimalConfig(), "/base", &defaults).ok());
  EXPECT_EQ(defaults.gpu.mps, "off");
  EXPECT_EQ(defaults.models[0].instances[0].precision, "fp32");
  EXPECT_EQ(defaults.models[0].instances[0].streams, 1);
  EXPECT_TRUE(defaults.models[0].instances[0].pin_memory);
}

TEST(ConfigTest, GpuKeyErrorsNameExpectedAndReceived) {
  json j = MinimalConfig();
  j["gpu"] = {{"mps", "sometimes"}};
  EXPECT_THAT(ParseError(j), HasSubstr("config.gpu.mps: expected \"off\", \"auto\" or \"required\", got \"sometimes\""));
  j["gpu"] = {{"mps", "auto"}, {"active_thread_percentage", 0}};
  EXPECT_THAT(ParseError(j), HasSubstr("config.gpu.active_thread_percentage: expected an integer in 1..100, got number 0"));
  j["gpu"] = {{"mps", "auto"}, {"daemon", true}};
  EXPECT_THAT(ParseError(j), HasSubstr("config.gpu: unknown key 'daemon'"));

  j = MinimalConfig();
  j["models"][0]["instances"] = json::parse(R"([{"device": "cuda:0", "precision": "int8"}])");
  EXPECT_THAT(ParseError(j), HasSubstr("instances[0].precision: expected \"fp32\", \"fp16\" or \"bf16\", got \"int8\""));
  j["models"][0]["instances"] = json::parse(R"([{"device": "cpu", "streams": 2}])");
  EXPECT_THAT(ParseError(j), HasSubstr("instances[0].streams: 2 streams need a \"cuda:N\" device, got \"cpu\""));
  j["models"][0]["instances"] = json::parse(R"([{"device": "cuda:0", "streams": 4}])");
  EXPECT_THAT(ParseError(j), HasSubstr("streams need at least as many batches in flight, but max_inflight_per_worker is 2"));
  j["models"][0]["instances"] = json::parse(R"([{"device": "cuda:0", "cudnn_benchmark": "yes"}])");
  EXPECT_THAT(ParseError(j), HasSubstr("instances[0].cudnn_benchmark: expected true or false, got string \"yes\""));
}

TEST(ConfigTest, ClientShmKeysAndDefaults) {
  FarmConfig defaults;
  ASSERT_TRUE(ParseConfig(MinimalConfig(), "/base", &defaults).ok());
  EXPECT_TRUE(defaults.client_shm.enabled);
  EXPECT_TRUE(defaults.client_shm.in_place);
  EXPECT_EQ(defaults.client_shm.max_region_bytes, uint64_t{1} << 30);
  EXPECT_EQ(defaults.client_shm.max_total_bytes, uint64_t{4} << 30);
  EXPECT_EQ(defaults.client_shm.max_regions, 64);
  EXPECT_EQ(defaults.client_shm.max_regions_per_client, 16);
  EXPECT_EQ(defaults.client_shm.idle_timeout_s, 600);

  json j = MinimalConfig();
  j["client_shm"] = {{"enabled", false}, {"in_place", false}, {"max_region_bytes", 4096},
                     {"max_total_bytes", 8192}, {"max_regions", 2}, {"max_regions_per_client", 1},
                     {"idle_timeout_s", 5}};
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  EXPECT_FALSE(c.client_shm.enabled);
  EXPECT_FALSE(c.client_shm.in_place);
  EXPECT_EQ(c.client_shm.max_region_bytes, 4096u);
  EXPECT_EQ(c.client_shm.max_total_bytes, 8192u);
  EXPECT_EQ(c.client_shm.max_regions, 2);
  EXPECT_EQ(c.client_shm.max_regions_per_client, 1);
  EXPECT_EQ(c.client_shm.idle_timeout_s, 5);

  j["client_shm"] = {{"max_regions", 0}};
  EXPECT_THAT(ParseError(j), HasSubstr("config.client_shm.max_regions: expected an integer in 1..65536, got number 0"));
  j["client_shm"] = {{"enabled", "yes"}};
  EXPECT_THAT(ParseError(j), HasSubstr("config.client_shm.enabled: expected true or false"));
  j["client_shm"] = {{"regions", 3}};
  EXPECT_THAT(ParseError(j), HasSubstr("config.client_shm: unknown key 'regions'"));
  j["client_shm"] = 1;
  EXPECT_THAT(ParseError(j), HasSubstr("config.client_shm: expected an object"));
}

TEST(ConfigTest, WarmupTakesBatchSizesOrShapesAndRoundTripsToTheWorker) {
  json j = MinimalConfig();
  j["models"][0]["max_batch_size"] = 16;
  j["models"][0]["warmup"] = json::parse("[1, 16, [[3, 4]]]");
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  const auto& warmup = c.models[0].warmup;
  ASSERT_EQ(warmup.size(), 3u);
  EXPECT_EQ(warmup[0][0].shape, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(warmup[1][0].shape, (std::vector<int64_t>{16, 4}));
  EXPECT_EQ(warmup[2][0].shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(warmup[2][0].dtype, DType::kFloat32);
  std::vector<std::vector<TensorSpec>> back;
  ASSERT_TRUE(WarmupFromJson(WarmupToJson(warmup), &back).ok());
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[1][0].shape, warmup[1][0].shape);
  EXPECT_EQ(back[1][0].dtype, warmup[1][0].dtype);

  j["models"][0]["warmup"] = json::parse("[32]");
  EXPECT_THAT(ParseError(j), HasSubstr("warmup[0]: expected a batch size in 1..16 (max_batch_size), got number 32"));
  j["models"][0]["warmup"] = json::parse("[[[3, 5]]]");
  EXPECT_THAT(ParseError(j), HasSubstr("models[0].warmup[0]: input 0: shape mismatch: expected float32 [-1, 4], got float32 [3, 5]"));
  j["models"][0]["warmup"] = json::parse("[[[3, 4], [1]]]");
  EXPECT_THAT(ParseError(j), HasSubstr("warmup[0]: expected a batch size or an array of 1 shape(s) (one per input)"));
  j["models"][0]["warmup"] = json::parse("[[[3, -1]]]");
  EXPECT_THAT(ParseError(j), HasSubstr("warmup[0][0]: expected a shape of non-negative integers"));
  j["models"][0]["inputs"] = json::parse(R"([{"dtype": "float32", "shape": [-1, -1]}])");
  j["models"][0]["warmup"] = json::parse("[4]");
  EXPECT_THAT(ParseError(j), HasSubstr("with a free trailing dimension; give shapes"));
}

TEST(ConfigTest, LoadConfigFileResolvesAgainstTheFilesFolder) {
  std::string dir = ::testing::TempDir();
  if (!dir.empty() && dir.back() == '/') dir.pop_back();
  std::string path = dir + "/torchfarm_config_test.json";
  {
    std::ofstream out(path);
    out << MinimalConfig().dump();
  }
  FarmConfig c;
  ASSERT_TRUE(LoadConfigFile(path, &c).ok());
  EXPECT_EQ(c.source_path, path);
  EXPECT_EQ(c.models[0].path, dir + "/m.pt");
  {
    std::ofstream out(path);
    out << "{ not json";
  }
  Status s = LoadConfigFile(path, &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is not valid JSON"));
  s = LoadConfigFile(dir + "/does_not_exist.json", &c);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace torchfarm

namespace torchfarm {
namespace {

// Every restart key and max_queue_wait_ms at the limits README documents: both ends accepted,
// one past either end refused with the key's path, the range and what was given.
TEST(ConfigTest, RestartKeysAndMaxQueueWaitAtTheirDocumentedLimits) {
  struct Key {
    std::string name;
    int64_t low, high;
    bool in_model;
  };
  const Key keys[] = {{"initial_backoff_ms", 0, 3'600'000, false},
                      {"max_backoff_ms", 0, 3'600'000, false},
                      {"max_restarts", 0, 1'000'000, false},
                      {"window_ms", 1, 86'400'000, false},
                      {"healthy_after_ms", 0, 86'400'000, false},
                      {"failed_retry_ms", 1'000, 86'400'000, false},
                      {"max_queue_wait_ms", 0, 86'400'000, true}};
  auto with = [](const Key& key, int64_t value) {
    json j = MinimalConfig();
    if (key.in_model) {
      j["models"][0][key.name] = value;
    } else {
      j["restart"] = {{key.name, value}};
    }
    return j;
  };
  for (const Key& key : keys) {
    for (int64_t value : {key.low, key.high}) {
      FarmConfig c;
      ASSERT_TRUE(ParseConfig(with(key, value), "/base", &c).ok()) << key.name << "=" << value;
      const RestartConfig& r = c.restart;
      const int64_t read = key.name == "initial_backoff_ms" ? r.initial_backoff_ms
                           : key.name == "max_backoff_ms"   ? r.max_backoff_ms
                           : key.name == "max_restarts"     ? r.max_restarts
                           : key.name == "window_ms"        ? r.window_ms
                           : key.name == "healthy_after_ms" ? r.healthy_after_ms
                           : key.name == "failed_retry_ms"  ? r.failed_retry_ms
                                                            : c.models[0].max_queue_wait_ms;
      EXPECT_EQ(read, value) << key.name;
    }
    const std::string path = key.in_model ? "config.models[0]." + key.name
                                          : "config.restart." + key.name;
    EXPECT_THAT(ParseError(with(key, key.low - 1)), HasSubstr(path + ": expected an integer in"));
    EXPECT_THAT(ParseError(with(key, key.high + 1)),
                HasSubstr(std::to_string(key.high + 1)));
  }
  FarmConfig defaults;
  ASSERT_TRUE(ParseConfig(MinimalConfig(), "/base", &defaults).ok());
  EXPECT_EQ(defaults.restart.initial_backoff_ms, 100);
  EXPECT_EQ(defaults.restart.max_backoff_ms, 5'000);
  EXPECT_EQ(defaults.restart.max_restarts, 5);
  EXPECT_EQ(defaults.restart.window_ms, 60'000);
  EXPECT_EQ(defaults.restart.healthy_after_ms, 10'000);
  EXPECT_EQ(defaults.restart.failed_retry_ms, 300'000);
  EXPECT_EQ(defaults.models[0].max_queue_wait_ms, 30'000);
}

TEST(ConfigTest, FrontendKeysAtTheirDocumentedLimits) {
  struct Key {
    std::string name;
    int64_t low, high;
  };
  const Key keys[] = {{"threads", 1, 64},
                      {"max_connections", 1, 1'000'000},
                      {"idle_timeout_ms", 100, 86'400'000},
                      {"request_timeout_ms", 100, 86'400'000},
                      {"max_header_bytes", 1024, 1 << 20},
                      {"max_body_bytes", 1024, int64_t{4} << 30},
                      {"max_inflight_body_bytes", int64_t{64} << 20, int64_t{1} << 40}};
  auto with = [](const Key& key, int64_t value) {
    json j = MinimalConfig();
    j["frontend"] = {{key.name, value}};
    return j;
  };
  for (const Key& key : keys) {
    for (int64_t value : {key.low, key.high}) {
      json j = with(key, value);
      // The body budget may not be below one body.
      if (key.name == "max_body_bytes") j["frontend"]["max_inflight_body_bytes"] = int64_t{1} << 40;
      FarmConfig c;
      ASSERT_TRUE(ParseConfig(j, "/base", &c).ok()) << key.name << "=" << value;
      const FrontendConfig& f = c.frontend;
      const int64_t read = key.name == "threads"              ? f.threads
                           : key.name == "max_connections"    ? f.max_connections
                           : key.name == "idle_timeout_ms"    ? f.idle_timeout_ms
                           : key.name == "request_timeout_ms" ? f.request_timeout_ms
                           : key.name == "max_header_bytes"   ? int64_t(f.max_header_bytes)
                           : key.name == "max_body_bytes"     ? int64_t(f.max_body_bytes)
                                                              : int64_t(f.max_inflight_body_bytes);
      EXPECT_EQ(read, value) << key.name;
    }
    const std::string path = "config.frontend." + key.name;
    if (key.name != "max_inflight_body_bytes") {
      EXPECT_THAT(ParseError(with(key, key.low - 1)), HasSubstr(path + ": expected an integer in"));
    }
    EXPECT_THAT(ParseError(with(key, key.high + 1)), HasSubstr(std::to_string(key.high + 1)));
    for (int64_t wild : {int64_t{1} << 31, int64_t{1} << 32, INT64_MAX, int64_t{-1}}) {
      if (wild >= key.low && wild <= key.high) continue;
      EXPECT_THAT(ParseError(with(key, wild)), HasSubstr(path)) << wild;
    }
  }
  // max_inflight_body_bytes below max_body_bytes names both.
  json small = MinimalConfig();
  small["frontend"] = {{"max_body_bytes", 8192}, {"max_inflight_body_bytes", 4096}};
  EXPECT_THAT(ParseError(small), HasSubstr("max_inflight_body_bytes: expected at least "
                                           "max_body_bytes (8192), got 4096"));
  FarmConfig defaults;
  ASSERT_TRUE(ParseConfig(MinimalConfig(), "/base", &defaults).ok());
  const FrontendConfig& f = defaults.frontend;
  EXPECT_FALSE(f.enabled());
  EXPECT_EQ(f.threads, 1);
  EXPECT_EQ(f.max_connections, 1024);
  EXPECT_EQ(f.idle_timeout_ms, 60'000);
  EXPECT_EQ(f.request_timeout_ms, 30'000);
  EXPECT_EQ(f.max_header_bytes, 16u << 10);
  EXPECT_EQ(f.max_body_bytes, 64u << 20);
  EXPECT_EQ(f.max_inflight_body_bytes, uint64_t{1} << 30);
  EXPECT_FALSE(f.tls.enabled());
  EXPECT_TRUE(f.dashboard) << "the dashboard is on wherever http_endpoint is";
}

TEST(ConfigTest, FrontendDashboardIsABoolean) {
  json j = MinimalConfig();
  j["frontend"] = {{"dashboard", false}};
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  EXPECT_FALSE(c.frontend.dashboard);
  j["frontend"] = {{"dashboard", "off"}};
  EXPECT_THAT(ParseError(j), HasSubstr("config.frontend.dashboard"));
}

// frontend.system_shared_memory: off by default, a boolean, both values taken; anything else is
// refused naming the key.
TEST(ConfigTest, FrontendSystemSharedMemoryIsAnOffByDefaultBoolean) {
  FarmConfig defaults;
  ASSERT_TRUE(ParseConfig(MinimalConfig(), "/base", &defaults).ok());
  EXPECT_FALSE(defaults.frontend.system_shared_memory);
  json j = MinimalConfig();
  for (bool value : {true, false}) {
    j["frontend"] = {{"system_shared_memory", value}};
    FarmConfig c;
    ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
    EXPECT_EQ(c.frontend.system_shared_memory, value);
  }
  for (json bad : {json("true"), json(1), json(nullptr)}) {
    j["frontend"] = {{"system_shared_memory", bad}};
    EXPECT_THAT(ParseError(j), HasSubstr("config.frontend.system_shared_memory")) << bad;
  }
}

// frontend.client_id_header: off ("") by default; an HTTP header name of 1..64 tchar characters in
// any case, kept lowercase (gRPC's metadata keys are); anything else refused naming the key, the
// rule and what was received. Random names over the whole range too (the seed is printed).
TEST(ConfigTest, FrontendClientIdHeaderIsAnHttpHeaderNameOrOff) {
  FarmConfig defaults;
  ASSERT_TRUE(ParseConfig(MinimalConfig(), "/base", &defaults).ok());
  EXPECT_EQ(defaults.frontend.client_id_header, "");
  json j = MinimalConfig();
  auto parsed = [&](const json& value) {
    j["frontend"] = {{"client_id_header", value}};
    FarmConfig c;
    Status s = ParseConfig(j, "/base", &c);
    EXPECT_TRUE(s.ok()) << value << ": " << s.ToString();
    return c.frontend.client_id_header;
  };
  EXPECT_EQ(parsed(""), "");
  EXPECT_EQ(parsed("X-Tenant"), "x-tenant");
  EXPECT_EQ(parsed("a"), "a");
  EXPECT_EQ(parsed("!#$%&'*+-.^_`|~09AZaz"), "!#$%&'*+-.^_`|~09azaz");
  EXPECT_EQ(parsed(std::string(64, 'T')), std::string(64, 't'));
  auto refused = [&](const json& value) {
    j["frontend"] = {{"client_id_header", value}};
    return ParseError(j);
  };
  EXPECT_EQ(refused("x tenant"),
            "config.frontend.client_id_header: expected an HTTP header name (letters, digits, "
            "-_.!#$%&'*+^`|~, 1..64 characters) or \"\" for off, got string \"x tenant\"");
  EXPECT_EQ(refused(std::string(65, 't')),
            "config.frontend.client_id_header: expected an HTTP header name (letters, digits, "
            "-_.!#$%&'*+^`|~, 1..64 characters) or \"\" for off, got string \"" +
                std::string(65, 't') + "\"");
  for (const char* bad : {"x:tenant", "x-tenant\r\n", ":authority", "x\"t", "x(t)", "x/t", "x@t",
                          "x=t", "t\xc3\xa9"}) {
    EXPECT_THAT(refused(bad), HasSubstr("config.frontend.client_id_header: expected an HTTP "
                                        "header name"))
        << bad;
  }
  for (const json& wrong : {json(1), json(true), json(nullptr), json::array({"x-tenant"}),
                            json::object({{"name", "x-tenant"}})}) {
    EXPECT_THAT(refused(wrong), HasSubstr("config.frontend.client_id_header: expected a string "
                                          "(an HTTP header name, or \"\" for off), got " +
                                          std::string(wrong.type_name())))
        << wrong;
  }
  const std::string tchar =
      "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (int round = 0; round < 200; ++round) {
    std::string name(std::uniform_int_distribution<size_t>(1, 64)(rng), 'x');
    for (char& c : name) c = tchar[rng() % tchar.size()];
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    ASSERT_EQ(parsed(name), lower) << "seed " << seed << " name " << name;
    // One ASCII byte outside tchar anywhere (a config is JSON, so no invalid UTF-8 reaches it).
    const auto outside = static_cast<char>(rng() % 128);
    if (tchar.find(outside) != std::string::npos) continue;
    name[rng() % name.size()] = outside;
    ASSERT_THAT(refused(name), HasSubstr("expected an HTTP header name"))
        << "seed " << seed << " byte " << int(outside);
  }
}

TEST(ConfigTest, FrontendEndpointsFollowTheLoopbackRule) {
  auto parse = [](json extra, FarmConfig* c) {
    json j = MinimalConfig();
    j.update(extra);
    return ParseConfig(j, "/base", c);
  };
  FarmConfig c;
  ASSERT_TRUE(parse({{"http_endpoint", "127.0.0.1:8000"}, {"grpc_endpoint", "[::1]:0"}}, &c).ok());
  EXPECT_EQ(c.frontend.http_endpoint, "127.0.0.1:8000");
  EXPECT_EQ(c.frontend.grpc_endpoint, "[::1]:0");
  EXPECT_TRUE(parse({{"http_endpoint", "localhost:65535"}}, &c).ok());
  // Reachable from the network: refused without TLS or "insecure".
  Status s = parse({{"http_endpoint", "0.0.0.0:8000"}}, &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("config.http_endpoint: \"0.0.0.0:8000\" is reachable from "
                                     "the network but \"frontend.tls\" is not configured"));
  EXPECT_TRUE(parse({{"grpc_endpoint", "0.0.0.0:8001"}, {"insecure", true}}, &c).ok());
  ASSERT_TRUE(parse({{"http_endpoint", "10.0.0.1:8000"},
                     {"frontend", {{"tls", {{"cert_file", "tls/c.pem"}, {"key_file", "/k.pem"}}}}}},
                    &c)
                  .ok());
  EXPECT_EQ(c.frontend.tls.cert_file, "/base/tls/c.pem");
  EXPECT_EQ(c.frontend.tls.key_file, "/k.pem");
  // Malformed endpoints name the key, the form and what came.
  for (const char* bad : {"8000", "127.0.0.1:", "127.0.0.1:65536", ":8000", "127.0.0.1:80x",
                          "127.0.0.1:-1", "127.0.0.1:4294967296"}) {
    EXPECT_THAT(ParseError(json{{"models", MinimalConfig()["models"]}, {"http_endpoint", bad}}),
                HasSubstr("config.http_endpoint: expected \"HOST:PORT\""))
        << bad;
  }
  EXPECT_THAT(ParseError(json{{"models", MinimalConfig()["models"]},
                              {"http_endpoint", "127.0.0.1:8000"},
                              {"grpc_endpoint", "127.0.0.1:8000"}}),
              HasSubstr("config.grpc_endpoint: must differ from http_endpoint"));
  EXPECT_THAT(ParseError(json{{"models", MinimalConfig()["models"]},
                              {"frontend", {{"tls", {{"cert_file", "c.pem"}}}}}}),
              HasSubstr("config.frontend.tls"));
}

// `make run` serves configs/demo.json as shipped: on a 2-core machine (issue 16's fresh Debian)
// its CPU workers' threads fit the cores (the supervisor warns otherwise), and every model is
// warmed up before it reports ready, so the first request is as fast as the rest.
TEST(ConfigTest, DemoConfigFitsTwoCoresAndWarmsUpEveryModel) {
  FarmConfig c;
  ASSERT_TRUE(LoadConfigFile(std::string(TORCHFARM_SOURCE_DIR) + "/configs/demo.json", &c).ok());
  constexpr int kCores = 2;
  int threads = 0;
  for (const ModelConfig& model : c.models) {
    EXPECT_FALSE(model.warmup.empty()) << model.name << " has no warmup";
    for (const InstanceConfig& instance : model.instances) {
      if (instance.device == "cpu") {
        threads += ResolveInstanceCount(instance, kCores) * instance.threads;
      }
    }
  }
  EXPECT_LE(threads, kCores);
}

TEST(ConfigTest, ModelRepositoryPollAtItsDocumentedLimits) {
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(MinimalConfig(), "/base", &c).ok());
  EXPECT_EQ(c.model_repository_poll_s, 0) << "watch mode is off by default";
  for (int64_t v : {0, 1, 86'400}) {
    json j = MinimalConfig();
    j["model_repository_poll_s"] = v;
    ASSERT_TRUE(ParseConfig(j, "/base", &c).ok()) << v;
    EXPECT_EQ(c.model_repository_poll_s, v);
  }
  for (json v : {json(-1), json(86'401), json("5"), json(1.5)}) {
    json j = MinimalConfig();
    j["model_repository_poll_s"] = v;
    EXPECT_EQ(ParseError(j), "config.model_repository_poll_s: expected an integer in 0..86400, got " +
                                 std::string(v.type_name()) + " " + v.dump());
  }
}

TEST(ConfigTest, OneModelEntryParsesLikeTheFilesEntries) {
  std::vector<ModelConfig> versions;
  json entry = MinimalConfig()["models"][0];
  ASSERT_TRUE(ParseModelConfig(entry, "load.config", "/srv/farm", &versions).ok());
  ASSERT_EQ(versions.size(), 1u);
  const ModelConfig m = versions[0];
  EXPECT_EQ(m.version, "1");
  EXPECT_EQ(m.name, "m");
  EXPECT_EQ(m.path, "/srv/farm/m.pt") << "relative paths resolve against the given folder";
  FarmConfig whole;
  ASSERT_TRUE(ParseConfig(MinimalConfig(), "/srv/farm", &whole).ok());
  EXPECT_EQ(m.slot_bytes, whole.models[0].slot_bytes);
  EXPECT_EQ(m.max_batch_size, whole.models[0].max_batch_size);
  entry["max_batch_size"] = "big";
  Status s = ParseModelConfig(entry, "load.config", "/srv/farm", &versions);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("load.config.max_batch_size: expected"));
}

}  // namespace
}  // namespace torchfarm
