// The "pipeline" section of a model and limits.max_item_bytes (common/pipeline_config.h,
// common/config.h): every key at its documented limits, and errors that name path, range and value.
#include "common/pipeline_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "common/bytes_items.h"
#include "common/config.h"
#include "config_test_support.h"

namespace torchfarm {
namespace {

using ::torchfarm::testing::ParseError;

using nlohmann::json;
using ::testing::HasSubstr;

json ImageConfig(json pipeline) {
  json model = {{"name", "img"},
                {"path", "convnet.pt"},
                {"inputs", json::array({{{"dtype", "bytes"}, {"shape", {-1}}}})}};
  if (!pipeline.is_null()) model["pipeline"] = std::move(pipeline);
  return json{{"models", json::array({model})}};
}

TEST(PipelineConfigTest, DecodeThreadsAtTheirDocumentedLimitsAndTheDefault) {
  for (int threads : {kMinDecodeThreads, kMaxDecodeThreads}) {
    FarmConfig c;
    const json j = ImageConfig({{"decode", {{"format", "jpeg"}, {"threads", threads}}},
                                {"preprocess", "pre.pt"},
                                {"postprocess", "/abs/post.pt"}});
    ASSERT_TRUE(ParseConfig(j, "/base", &c).ok()) << threads;
    const PipelineConfig& p = c.models[0].pipeline;
    EXPECT_EQ(p.decode_format, "jpeg");
    EXPECT_EQ(p.threads, threads);
    EXPECT_EQ(p.preprocess, "/base/pre.pt");  // relative to the config's folder
    EXPECT_EQ(p.postprocess, "/abs/post.pt");
    PipelineConfig back;
    ASSERT_TRUE(PipelineFromJson(PipelineToJson(p), &back).ok());
    EXPECT_EQ(back, p);
  }
  for (int threads : {kMinDecodeThreads - 1, kMaxDecodeThreads + 1}) {
    const std::string error =
        ParseError(ImageConfig({{"decode", {{"format", "jpeg"}, {"threads", threads}}}}));
    EXPECT_THAT(error, HasSubstr("config.models[0].pipeline.decode.threads: expected an integer in "
                                 "1..64, got number " +
                                 std::to_string(threads)));
  }
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(ImageConfig({{"decode", {{"format", "jpeg"}}}}), "/base", &c).ok());
  EXPECT_EQ(c.models[0].pipeline.threads, kDefaultDecodeThreads);
  EXPECT_TRUE(c.models[0].pipeline.overlap);
  FarmConfig off;
  ASSERT_TRUE(ParseConfig(ImageConfig({{"decode", {{"format", "jpeg"}}}, {"overlap", false}}),
                          "/base", &off)
                  .ok());
  EXPECT_FALSE(off.models[0].pipeline.overlap);
  PipelineConfig back;
  ASSERT_TRUE(PipelineFromJson(PipelineToJson(off.models[0].pipeline), &back).ok());
  EXPECT_FALSE(back.overlap);
  EXPECT_TRUE(c.models[0].pipeline.enabled());
}

TEST(PipelineConfigTest, DecodeMaxPixelsAtItsDocumentedLimitsAndBeyondAndTheDefault) {
  for (int64_t pixels : {kMinDecodeMaxPixels, kDefaultDecodeMaxPixels, kMaxDecodeMaxPixels}) {
    FarmConfig c;
    const json j = ImageConfig({{"decode", {{"format", "jpeg"}, {"max_pixels", pixels}}}});
    ASSERT_TRUE(ParseConfig(j, "/base", &c).ok()) << pixels;
    EXPECT_EQ(c.models[0].pipeline.max_pixels, static_cast<uint64_t>(pixels));
    // The worker gets it on its command line.
    PipelineConfig back;
    ASSERT_TRUE(PipelineFromJson(PipelineToJson(c.models[0].pipeline), &back).ok());
    EXPECT_EQ(back.max_pixels, static_cast<uint64_t>(pixels));
    EXPECT_EQ(back, c.models[0].pipeline);
  }
  const std::string range =
      "config.models[0].pipeline.decode.max_pixels: expected an integer in "
      "1..1073741824, got ";
  for (const json& bad : {json(0), json(-1), json(kMaxDecodeMaxPixels + 1),
                          json(std::numeric_limits<uint64_t>::max()), json(1.5), json("64")}) {
    EXPECT_THAT(ParseError(ImageConfig({{"decode", {{"format", "jpeg"}, {"max_pixels", bad}}}})),
                HasSubstr(range + std::string(bad.type_name()) + " " + bad.dump()))
        << bad.dump();
  }
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(ImageConfig({{"decode", {{"format", "jpeg"}}}}), "/base", &c).ok());
  EXPECT_EQ(c.models[0].pipeline.max_pixels, static_cast<uint64_t>(kDefaultDecodeMaxPixels));
  EXPECT_EQ(kDefaultDecodeMaxPixels, int64_t{64} << 20);
  // A changed limit is a changed pipeline (a reload restarts the model's workers).
  PipelineConfig other = c.models[0].pipeline;
  other.max_pixels = 1;
  EXPECT_FALSE(other == c.models[0].pipeline);
}

TEST(PipelineConfigTest, ErrorsNameThePathTheExpectationAndTheValue) {
  EXPECT_THAT(ParseError(ImageConfig({{"decode", {{"format", "png"}}}})),
              HasSubstr("pipeline.decode.format: expected \"jpeg\", got string \"png\""));
  EXPECT_THAT(ParseError(ImageConfig({{"decode", {{"format", "jpeg"}, {"speed", 1}}}})),
              HasSubstr("pipeline.decode: unknown key 'speed'"));
  EXPECT_THAT(ParseError(ImageConfig({{"decode", {{"format", "jpeg"}}}, {"overlap", 1}})),
              HasSubstr("pipeline.overlap: expected true or false, got number 1"));
  EXPECT_THAT(ParseError(ImageConfig({{"resize", 1}})),
              HasSubstr("config.models[0].pipeline: unknown key 'resize'"));
  EXPECT_THAT(ParseError(ImageConfig({{"decode", {{"format", "jpeg"}}}, {"preprocess", 3}})),
              HasSubstr("pipeline.preprocess: expected a TorchScript file name, got number 3"));
  // A bytes input with nothing to decode it.
  EXPECT_THAT(ParseError(ImageConfig(nullptr)),
              HasSubstr("config.models[0].inputs[0]: a bytes input needs \"pipeline\""));
  EXPECT_THAT(ParseError(ImageConfig({{"preprocess", "pre.pt"}})),
              HasSubstr("a bytes input needs"));
  // Decode needs exactly one bytes [-1] input.
  json two = ImageConfig({{"decode", {{"format", "jpeg"}}}});
  two["models"][0]["inputs"].push_back({{"dtype", "float32"}, {"shape", {-1, 2}}});
  EXPECT_THAT(ParseError(two), HasSubstr("the model's inputs must be one bytes [-1]"));
  json floats = ImageConfig({{"decode", {{"format", "jpeg"}}}});
  floats["models"][0]["inputs"] = json::array({{{"dtype", "float32"}, {"shape", {-1, 4}}}});
  EXPECT_THAT(ParseError(floats), HasSubstr("got [float32 [-1, 4]]"));
  // Zero-filled warm-up batches are no images.
  json warm = ImageConfig({{"decode", {{"format", "jpeg"}}}});
  warm["models"][0]["warmup"] = json::array({1});
  EXPECT_THAT(ParseError(warm), HasSubstr("remove \"warmup\" from a model that decodes"));
}

TEST(PipelineConfigTest, PreprocessAloneServesATensorModel) {
  json j = {
      {"models",
       json::array({{{"name", "m"},
                     {"path", "m.pt"},
                     {"inputs", json::array({{{"dtype", "uint8"}, {"shape", {-1, 8, 8, 3}}}})},
                     {"pipeline", {{"preprocess", "pre.pt"}}}}})}};
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
  EXPECT_TRUE(c.models[0].pipeline.decode_format.empty());
  EXPECT_EQ(c.models[0].pipeline.preprocess, "/base/pre.pt");
  EXPECT_EQ(PipelineToJson(PipelineConfig{}), "");  // no --pipeline for a model without stages
  j["models"][0]["inputs"].push_back({{"dtype", "float32"}, {"shape", {-1, 2}}});
  EXPECT_THAT(ParseError(j), HasSubstr("pipeline.preprocess: runs on the rows of the model's one "
                                       "input; the model has 2 inputs"));
  j["models"][0]["pipeline"] = {{"postprocess", "post.pt"}};  // any inputs without preprocess
  ASSERT_TRUE(ParseConfig(j, "/base", &c).ok());
}

TEST(PipelineConfigTest, MaxItemBytesAtItsDocumentedLimitsAndTheDefault) {
  for (int64_t value : {int64_t{1}, static_cast<int64_t>(kMaxBytesItem)}) {
    json j = ImageConfig({{"decode", {{"format", "jpeg"}}}});
    j["limits"] = {{"max_item_bytes", value}};
    FarmConfig c;
    ASSERT_TRUE(ParseConfig(j, "/base", &c).ok()) << value;
    EXPECT_EQ(c.limits.request.max_item_bytes, static_cast<uint64_t>(value));
  }
  for (int64_t value : {int64_t{0}, static_cast<int64_t>(kMaxBytesItem) + 1}) {
    json j = ImageConfig({{"decode", {{"format", "jpeg"}}}});
    j["limits"] = {{"max_item_bytes", value}};
    EXPECT_THAT(ParseError(j), HasSubstr("config.limits.max_item_bytes: expected an integer in "
                                         "1..4294967295, got number " +
                                         std::to_string(value)));
  }
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(ImageConfig({{"decode", {{"format", "jpeg"}}}}), "/base", &c).ok());
  EXPECT_EQ(c.limits.request.max_item_bytes, kDefaultMaxItemBytes);
}

// `make run-images` serves configs/images.json as shipped: every worker's intra-op threads plus
// its decode threads fit the 2 cores of the development VM (docs/benchmarks.md, "Image pipeline":
// oversubscribed threads lose).
TEST(PipelineConfigTest, ImagesConfigParsesAndEachWorkerFitsTwoCores) {
  FarmConfig c;
  Status s = LoadConfigFile(std::string(TORCHFARM_SOURCE_DIR) + "/configs/images.json", &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(c.models.size(), 3u);
  EXPECT_EQ(c.models[0].name, "resnet18");
  EXPECT_EQ(c.models[0].inputs[0], (TensorSpec{DType::kBytes, {-1}}));
  for (const ModelConfig& m : c.models) {
    const int decode = m.pipeline.decode_format.empty() ? 0 : m.pipeline.threads;
    EXPECT_LE(m.instances[0].threads + decode, 2) << m.name;
  }
}

TEST(PipelineConfigTest, WorkerArgumentErrorsNameWhatWasExpected) {
  PipelineConfig p;
  EXPECT_THAT(PipelineFromJson("[1]", &p).message(), HasSubstr("expected a JSON object"));
  EXPECT_THAT(PipelineFromJson(R"({"decode": "jpeg"})", &p).message(),
              HasSubstr("expected decode, threads, preprocess and postprocess"));
  EXPECT_THAT(PipelineFromJson(
                  R"({"decode": "jpeg", "threads": 0, "preprocess": "", "postprocess": ""})", &p)
                  .message(),
              HasSubstr("threads expected in 1..64, got 0"));
  EXPECT_THAT(
      PipelineFromJson(R"({"decode": "jpeg", "threads": 2, "preprocess": "", )"
                       R"("postprocess": "", "max_pixels": 0})",
                       &p)
          .message(),
      HasSubstr("--pipeline: max_pixels: expected an integer in 1..1073741824, got number 0"));
  // Without max_pixels (a supervisor older than the key): the default.
  ASSERT_TRUE(PipelineFromJson(
                  R"({"decode": "jpeg", "threads": 2, "preprocess": "", "postprocess": ""})", &p)
                  .ok());
  EXPECT_EQ(p.max_pixels, static_cast<uint64_t>(kDefaultDecodeMaxPixels));
}

}  // namespace
}  // namespace torchfarm
