// Issue 30's extensions as pure functions: classification (v2_classification.h) and the model
// repository's HTTP bodies (v2_repository.h), with hostile input before a good one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/bytes_items.h"
#include "supervisor/frontend/v2_classification.h"
#include "supervisor/frontend/v2_http_codec.h"
#include "supervisor/frontend/v2_repository.h"

namespace torchfarm {
namespace {

using nlohmann::json;

V2Tensor Tensor(const std::string& datatype, std::vector<int64_t> shape, const void* bytes,
                size_t size) {
  V2Tensor t;
  t.name = "scores";
  t.datatype = datatype;
  t.shape = std::move(shape);
  t.data = zmq::message_t(bytes, size);
  return t;
}

std::vector<std::string> Items(const V2Tensor& t) {
  std::vector<std::string> out;
  for (const json& item : BytesDataJson(t)) out.push_back(item.get<std::string>());
  return out;
}

TEST(V2ClassificationTest, TopKPerRowAsScoreColonIndexStrings) {
  const float scores[] = {0.1f,  0.7f,  0.2f, 0.7f,   // row 0: a tie, the lower index first
                          -1.0f, -3.0f, 5.5f, 0.0f};  // row 1
  V2Tensor t = Tensor("FP32", {2, 4}, scores, sizeof(scores));
  ASSERT_TRUE(ClassifyOutput(2, &t).ok());
  EXPECT_EQ(t.datatype, "BYTES");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Items(t),
            (std::vector<std::string>{"0.700000:1", "0.700000:3", "5.500000:2", "0.000000:3"}));
  // Triton's BYTES layout: a 4-byte little-endian length before each item.
  uint32_t first = 0;
  std::memcpy(&first, t.data.data(), 4);
  EXPECT_EQ(first, 10u);

  const float odd[] = {std::nanf(""), -INFINITY, 2.0f, std::nanf("")};
  V2Tensor nan = Tensor("FP32", {4}, odd, sizeof(odd));
  ASSERT_TRUE(ClassifyOutput(4, &nan).ok());
  EXPECT_EQ(Items(nan)[0], "2.000000:2") << "NaN ranks last";

  const int64_t labels[] = {3, 9, -2};
  V2Tensor ints = Tensor("INT64", {3}, labels, sizeof(labels));
  ASSERT_TRUE(ClassifyOutput(10, &ints).ok()) << "more classes asked than there are: all";
  EXPECT_EQ(ints.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(Items(ints), (std::vector<std::string>{"9:1", "3:0", "-2:2"}));
}

TEST(V2ClassificationTest, RefusesWhatCannotBeClassifiedThenClassifies) {
  const float one = 1.0f;
  V2Tensor scalar = Tensor("FP32", {}, &one, sizeof(one));
  EXPECT_NE(ClassifyOutput(1, &scalar).message().find("rank 1 or more"), std::string::npos);
  V2Tensor t = Tensor("FP32", {1}, &one, sizeof(one));
  EXPECT_FALSE(ClassifyOutput(0, &t).ok());
  EXPECT_FALSE(ClassifyOutput(-5, &t).ok());
  EXPECT_FALSE(ClassifyOutput(kMaxClassCount + 1, &t).ok());
  V2Tensor bytes = Tensor("BYTES", {1}, "\1\0\0\0x", 5);
  EXPECT_FALSE(ClassifyOutput(1, &bytes).ok());
  ASSERT_TRUE(ClassifyOutput(1, &t).ok());
  EXPECT_EQ(Items(t), (std::vector<std::string>{"1.000000:0"}));
}

TEST(V2ClassificationTest, HttpWritesBytesOutputsAsStringsOrBinary) {
  const float scores[] = {0.25f, 0.75f};
  V2InferResponse response;
  response.model = "m";
  response.outputs.push_back(Tensor("FP32", {1, 2}, scores, sizeof(scores)));
  ASSERT_TRUE(ClassifyOutput(1, &response.outputs[0]).ok());
  response.binary = {false};
  json j = json::parse(WriteV2InferResponse(response).bytes);
  EXPECT_EQ(j["outputs"][0]["datatype"], "BYTES");
  EXPECT_EQ(j["outputs"][0]["data"], json::array({"0.750000:1"}));
  response.binary = {true};
  V2HttpBody body = WriteV2InferResponse(response);
  ASSERT_TRUE(body.json_bytes.has_value());
  EXPECT_EQ(body.bytes.substr(*body.json_bytes), std::string("\x0a\0\0\0"
                                                             "0.750000:1",
                                                             14));
}

TEST(V2RepositoryTest, BodiesAreCheckedThenAccepted) {
  bool ready = true;
  for (const char* bad :
       {"{", "[]", "3", "{\"ready\": 1}", "{\"ready\": \"yes\"}", "\xff\xfe", "null"}) {
    EXPECT_EQ(ParseRepositoryIndexBody(bad, &ready).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(ParseRepositoryIndexBody(std::string(100000, '['), &ready).ok());
  EXPECT_FALSE(ParseRepositoryIndexBody(std::string(70000, ' ') + "x", &ready).ok());
  ASSERT_TRUE(ParseRepositoryIndexBody("", &ready).ok());
  EXPECT_FALSE(ready);
  ASSERT_TRUE(
      ParseRepositoryIndexBody("{\"ready\": true, \"repository_name\": \"x\"}", &ready).ok());
  EXPECT_TRUE(ready);

  for (const char* bad : {"{\"parameters\": 1}", "{\"parameters\": {\"config\": \"{}\"}}",
                          "{\"parameters\": {\"file:1/model.pt\": \"AAAA\"}}", "[", "\"x\""}) {
    EXPECT_EQ(ParseRepositoryControlBody(bad).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseRepositoryControlBody("{\"parameters\": {\"config\": \"{}\"}}")
                .message()
                .find("parameters.config: not supported"),
            std::string::npos);
  EXPECT_TRUE(ParseRepositoryControlBody("").ok());
  EXPECT_TRUE(ParseRepositoryControlBody("{\"parameters\": {\"unload_dependents\": true}}").ok());
}

TEST(V2RepositoryTest, RoutesThePostPathsOnly) {
  namespace http = boost::beast::http;
  V2Target t = ParseV2Target(http::verb::post, "/v2/repository/index");
  EXPECT_EQ(t.http_status, 0);
  EXPECT_EQ(t.route, V2Route::kRepositoryIndex);
  t = ParseV2Target(http::verb::post, "/v2/repository/models/a%2Fb/unload");
  EXPECT_EQ(t.route, V2Route::kRepositoryUnload);
  EXPECT_EQ(t.model, "a/b") << "decoded; the loop refuses it (repository_api.h)";
  t = ParseV2Target(http::verb::get, "/v2/repository/models/m/load");
  EXPECT_EQ(t.http_status, 405);
  EXPECT_EQ(t.allow, "POST");
  EXPECT_EQ(ParseV2Target(http::verb::post, "/v2/repository/models/m/reload").http_status, 404);
  EXPECT_EQ(ParseV2Target(http::verb::post, "/v2/repository").http_status, 404);
}

}  // namespace
}  // namespace torchfarm
