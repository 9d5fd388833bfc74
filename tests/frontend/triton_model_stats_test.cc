// TritonModelStatsJson: the farm's counters as Triton's model statistics (issue 30 item 6).
#include "supervisor/frontend/triton_model_stats.h"

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

using nlohmann::json;

const json kMeta = {{"models",
                     {{{"name", "mlp"},
                       {"version", "1"},
                       {"statistics",
                        {{"requests", 10},
                         {"errors", 2},
                         {"batches", 4},
                         {"rows", 12},
                         {"queue_us", 50},
                         {"compute_us", 300},
                         {"total_us", 400},
                         {"last_inference_ms", 1764780000000}}}},
                      {{"name", "mlp"}, {"version", "2"}, {"statistics", json::object()}},
                      {{"name", "other"}, {"version", "1"}}}}};

TEST(TritonModelStatsTest, CountersBecomeTritonsFieldsInNanoseconds) {
  json out;
  ASSERT_TRUE(TritonModelStatsJson(kMeta, "mlp", "1", &out).ok());
  ASSERT_EQ(out["model_stats"].size(), 1u);
  EXPECT_EQ(out["model_stats"][0], json::parse(R"({
    "name": "mlp", "version": "1", "last_inference": 1764780000000, "inference_count": 12,
    "execution_count": 4,
    "inference_stats": {"success": {"count": 10, "ns": 400000}, "fail": {"count": 2, "ns": 0},
                        "queue": {"count": 10, "ns": 50000},
                        "compute_input": {"count": 10, "ns": 0},
                        "compute_infer": {"count": 10, "ns": 300000},
                        "compute_output": {"count": 10, "ns": 0},
                        "cache_hit": {"count": 0, "ns": 0}, "cache_miss": {"count": 0, "ns": 0}},
    "batch_stats": []})"))
      << out.dump(2);
}

TEST(TritonModelStatsTest, PicksEveryModelEveryVersionOrOne) {
  json out;
  ASSERT_TRUE(TritonModelStatsJson(kMeta, "", "", &out).ok());
  EXPECT_EQ(out["model_stats"].size(), 3u);
  ASSERT_TRUE(TritonModelStatsJson(kMeta, "mlp", "", &out).ok());
  EXPECT_EQ(out["model_stats"].size(), 2u);
  EXPECT_EQ(out["model_stats"][1]["inference_count"], 0);  // no counters yet: zeros
  ASSERT_TRUE(TritonModelStatsJson(kMeta, "other", "", &out).ok());
  EXPECT_EQ(out["model_stats"][0]["last_inference"], 0);
}

TEST(TritonModelStatsTest, UnknownModelsAndVersionsAreNotFoundInTheCommonWords) {
  json out;
  Status s = TritonModelStatsJson(kMeta, "stats", "", &out);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "model 'stats' is not served here (served: mlp, other)");
  s = TritonModelStatsJson(kMeta, "mlp", "9", &out);
  EXPECT_EQ(s.message(), "model 'mlp' has no version '9' (loaded versions: 1, 2)");
  EXPECT_TRUE(TritonModelStatsJson(json::object(), "", "", &out).ok());  // no models at all
  EXPECT_EQ(out["model_stats"], json::array());
}

}  // namespace
}  // namespace torchfarm
