// Config "client_weights" and the rule that combines it with a request's "client_weight"
// (common/client_weights.h, issue 32): weights at both limits (0.01, 100) accepted, one step past
// each refused with the key and the value; key lengths 1..255 bytes and at most 4096 entries, at
// and past each bound; "*" weighs the clients the table does not name; a request may lower its
// weight but never raise it above the configured one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/client_weights.h"
#include "common/config.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json WithWeights(const json& weights) {
  json j = json::parse(R"({
    "models": [{"name": "m", "path": "m.pt", "inputs": [{"dtype": "float32", "shape": [-1, 4]}]}]
  })");
  j["models"][0]["client_weights"] = weights;
  return j;
}

Status Parse(const json& weights, FarmConfig* c) {
  return ParseConfig(WithWeights(weights), "/base", c);
}

TEST(ClientWeightsTest, AbsentMeansEveryClientWeighsOne) {
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(WithWeights(json::object()), "/base", &c).ok());
  EXPECT_TRUE(c.models[0].client_weights.empty());
  EXPECT_EQ(c.models[0].client_weights.Configured("anyone"), 1);
}

TEST(ClientWeightsTest, WeightsAtBothLimitsAreAccepted) {
  FarmConfig c;
  const Status s = Parse({{"low", 0.01}, {"high", 100}, {"*", 0.5}}, &c);
  ASSERT_TRUE(s.ok()) << s.message();
  const ClientWeights& w = c.models[0].client_weights;
  EXPECT_EQ(w.Configured("low"), 0.01);
  EXPECT_EQ(w.Configured("high"), 100);
  EXPECT_EQ(w.Configured("someone else"), 0.5) << "\"*\" weighs the clients not named";
}

TEST(ClientWeightsTest, WeightsPastEitherLimitAreRefusedNamingKeyAndValue) {
  for (const json& bad : {json(0.0099), json(100.01), json(0), json(-1), json("2"), json(nullptr),
                          json::array({1})}) {
    FarmConfig c;
    const Status s = Parse({{"tenant-a", bad}}, &c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad.dump();
    EXPECT_THAT(s.message(),
                HasSubstr("config.models[0].client_weights[\"tenant-a\"]: expected a number in "
                          "0.01..100 (a client weight), got " +
                          std::string(bad.type_name()) + " " + bad.dump()))
        << bad.dump();
  }
}

TEST(ClientWeightsTest, KeysOf1To255BytesAndAtMost4096Entries) {
  FarmConfig c;
  EXPECT_TRUE(Parse({{"a", 2}}, &c).ok());
  EXPECT_TRUE(Parse({{std::string(255, 'k'), 2}}, &c).ok());
  Status s = Parse({{"", 2}}, &c);
  EXPECT_EQ(s.message(),
            "config.models[0].client_weights: expected client keys of 1..255 bytes, got one of 0 "
            "bytes");
  s = Parse({{std::string(256, 'k'), 2}}, &c);
  EXPECT_THAT(s.message(), HasSubstr("expected client keys of 1..255 bytes, got one of 256 bytes"));

  json many = json::object();
  for (size_t i = 0; i < kMaxClientWeightEntries; ++i) many["c" + std::to_string(i)] = 1.5;
  s = Parse(many, &c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(c.models[0].client_weights.by_client.size(), kMaxClientWeightEntries);
  many["one-more"] = 1.5;
  s = Parse(many, &c);
  EXPECT_EQ(s.message(),
            "config.models[0].client_weights: expected at most 4096 entries, got 4097");
  s = Parse(json::array({1}), &c);
  EXPECT_THAT(s.message(),
              HasSubstr("config.models[0].client_weights: expected an object of client key: "
                        "weight, got array [1]"));
}

TEST(ClientWeightsTest, ARequestMayLowerItsWeightButNeverRaiseIt) {
  ClientWeights w;
  w.by_client["tenant-a"] = 4;
  w.default_weight = 0.5;
  EXPECT_EQ(w.Effective("tenant-a", 0), 4) << "none asked for: the configured one";
  EXPECT_EQ(w.Effective("tenant-a", 1), 1) << "lowered";
  EXPECT_EQ(w.Effective("tenant-a", 100), 4) << "never above the operator's";
  EXPECT_EQ(w.Effective("stranger", 100), 0.5) << "nor above \"*\" for a client not named";
  EXPECT_EQ(w.Effective("stranger", 0.01), 0.01);
}

}  // namespace
}  // namespace torchfarm
