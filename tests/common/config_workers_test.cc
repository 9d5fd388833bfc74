// Config keys of how workers start and wait (issue 19): instances[].spares, instances[].idle_spin_us
// and worker_launch, at their documented defaults and limits.
#include <gtest/gtest.h>

#include "config_test_support.h"
#include "common/config.h"

namespace torchfarm {
namespace {

using ::torchfarm::testing::MinimalConfig;
using ::torchfarm::testing::ParseError;

using nlohmann::json;

json WithInstance(const char* key, json value) {
  json j = MinimalConfig();
  j["models"][0]["instances"] = json::array({{{"device", "cpu"}, {key, value}}});
  return j;
}

TEST(ConfigWorkersTest, Defaults) {
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(MinimalConfig(), "/base", &c).ok());
  EXPECT_EQ(c.worker_launch, "zygote");
  ASSERT_EQ(c.models[0].instances.size(), 1u);
  EXPECT_EQ(c.models[0].instances[0].spares, 0);
  EXPECT_EQ(c.models[0].instances[0].idle_spin_us, 300) << "adaptive idle polling is on";
}

TEST(ConfigWorkersTest, IntegerKeysAtAndBeyondTheirLimits) {
  struct Key {
    const char* name;
    int64_t low, high;
  };
  for (const Key& key : {Key{"spares", 0, 64}, Key{"idle_spin_us", 0, 100'000}}) {
    for (int64_t v : {key.low, key.low + 1, key.high}) {
      FarmConfig c;
      ASSERT_TRUE(ParseConfig(WithInstance(key.name, v), "/base", &c).ok()) << key.name << v;
      const InstanceConfig& i = c.models[0].instances[0];
      EXPECT_EQ(std::string(key.name) == "spares" ? i.spares : i.idle_spin_us, v);
    }
    const std::string range = std::to_string(key.low) + ".." + std::to_string(key.high);
    for (json v : {json(key.low - 1), json(key.high + 1), json(int64_t{1} << 31),
                   json(int64_t{1} << 32), json(INT64_MAX), json(-1), json("1"), json(1.5)}) {
      EXPECT_EQ(ParseError(WithInstance(key.name, v)),
                "config.models[0].instances[0]." + std::string(key.name) +
                    ": expected an integer in " + range + ", got " + v.type_name() + " " + v.dump());
    }
  }
}

TEST(ConfigWorkersTest, WorkerLaunchIsZygoteOrExec) {
  for (const char* v : {"zygote", "exec"}) {
    json j = MinimalConfig();
    j["worker_launch"] = v;
    FarmConfig c;
    ASSERT_TRUE(ParseConfig(j, "/base", &c).ok()) << v;
    EXPECT_EQ(c.worker_launch, v);
  }
  json j = MinimalConfig();
  j["worker_launch"] = "fork";
  EXPECT_EQ(ParseError(j), R"(config.worker_launch: expected "zygote" or "exec", got "fork")");
  j["worker_launch"] = 1;
  EXPECT_NE(ParseError(j).find("config.worker_launch"), std::string::npos);
}

// Issue 30 item 5: a model with inputs only gets dry runs at load that learn its outputs.
TEST(ConfigWorkersTest, OutputProbeBatchesOnlyWhenNothingElseReportsOutputs) {
  json j = MinimalConfig();
  j["models"][0]["inputs"] = json::parse(
      R"([{"dtype": "float32", "shape": [-1, 4]}, {"dtype": "int64", "shape": [-1, -1, 3]}])");
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  auto batches = OutputProbeBatches(c.models[0]);
  ASSERT_EQ(batches.size(), 2u) << "a variable dim past the batch's: two sizes";
  EXPECT_EQ(batches[0][0].shape, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(batches[0][1].shape, (std::vector<int64_t>{1, kProbeDimSmall, 3}));
  EXPECT_EQ(batches[1][1].shape, (std::vector<int64_t>{2, kProbeDimLarge, 3}));
  EXPECT_EQ(batches[1][1].dtype, DType::kInt64);
  std::vector<std::vector<TensorSpec>> back;
  ASSERT_TRUE(WarmupFromJson(WarmupToJson(batches), &back).ok());
  EXPECT_EQ(back[1][1].shape, batches[1][1].shape);

  ASSERT_TRUE(ParseConfig(MinimalConfig(), "/base", &c).ok());
  ASSERT_EQ(OutputProbeBatches(c.models[0]).size(), 2u) << "max_batch_size 1: rows vary too";
  EXPECT_EQ(OutputProbeBatches(c.models[0])[1][0].shape, (std::vector<int64_t>{2, 4}));
  j = MinimalConfig();
  j["models"][0]["max_batch_size"] = 8;
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  ASSERT_EQ(OutputProbeBatches(c.models[0]).size(), 1u) << "only the batch dim varies: one run";
  j = MinimalConfig();
  j["models"][0]["outputs"] = json::parse(R"([{"dtype": "float32", "shape": [-1, 2]}])");
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  EXPECT_TRUE(OutputProbeBatches(c.models[0]).empty()) << "declared outputs";
  j = MinimalConfig();
  j["models"][0]["warmup"] = json::array({1});
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  EXPECT_TRUE(OutputProbeBatches(c.models[0]).empty()) << "warm-up reports them";
}

}  // namespace
}  // namespace torchfarm
