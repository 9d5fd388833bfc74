// ParseRequestHeaderFast against ParseRequestHeaderJson: whatever the fast path accepts, the JSON
// path must accept with the same result; what it declines goes to the JSON path unchanged.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/protocol.h"

namespace torchfarm {
namespace {

using nlohmann::json;

void ExpectSame(const RequestHeader& a, const RequestHeader& b, const std::string& text) {
  EXPECT_EQ(a.id, b.id) << text;
  EXPECT_EQ(a.id.type(), b.id.type()) << text;
  EXPECT_EQ(a.id.dump(), b.id.dump()) << text;
  EXPECT_EQ(a.model, b.model) << text;
  EXPECT_EQ(a.version, b.version) << text;
  EXPECT_EQ(a.inputs, b.inputs) << text;
  EXPECT_EQ(a.input_names, b.input_names) << text;
  EXPECT_EQ(a.timeout_ms, b.timeout_ms) << text;
  EXPECT_EQ(a.deadline_unix_us, b.deadline_unix_us) << text;
  EXPECT_EQ(a.priority, b.priority) << text;
}

// True when the fast path took `text`; checks it against the JSON path either way.
bool FastTakes(const std::string& text, const RequestLimits& limits = RequestLimits{}) {
  RequestHeader fast, slow;
  bool took = ParseRequestHeaderFast(text, &fast, limits);
  Status s = ParseRequestHeaderJson(text, &slow, limits);
  if (took) {
    EXPECT_TRUE(s.ok()) << text << ": " << s.ToString();
    ExpectSame(fast, slow, text);
  }
  RequestHeader combined;
  Status c = ParseRequestHeader(text, &combined, limits);
  EXPECT_EQ(c.code(), s.code()) << text;
  EXPECT_EQ(c.message(), s.message()) << text;
  if (s.ok()) ExpectSame(combined, slow, text);
  return took;
}

TEST(ProtocolFastPathTest, TakesTheHeadersClientsSend) {
  EXPECT_TRUE(FastTakes(R"({"v":1,"id":7,"model":"mlp","inputs":[{"dtype":"float32","shape":[1,256]}]})"));
  EXPECT_TRUE(FastTakes(R"({"v":1,"id":0,"model":"identity","inputs":[{"dtype":"float32","shape":[1,4194304]}]})"));
  EXPECT_TRUE(FastTakes(R"({ "v" : 1 , "model" : "a.b-c_9", "inputs" : [ { "shape" : [ ] , "dtype" : "int64" } ,
      {"dtype":"uint8","shape":[2,3,4]} ], "timeout_ms": 250, "priority": 1000, "id": "req-1 x" } )"));
  EXPECT_TRUE(FastTakes(R"({"v":1,"id":null,"model":"m","inputs":[{"dtype":"bool","shape":[0]}],"timeout_ms":null,"priority":null})"));
  EXPECT_TRUE(FastTakes(
      R"({"v":1,"model":"m","inputs":[{"dtype":"int8","shape":[1]}],"timeout_ms":999999999999999999})"));
  EXPECT_TRUE(FastTakes(R"({"v":1,"id":true,"model":"m","inputs":[{"dtype":"float16","shape":[1]}]})"));
  EXPECT_TRUE(FastTakes(R"({"v":1,"id":123456789012345678,"model":"m","inputs":[{"dtype":"float64","shape":[1]}]})"));
  EXPECT_TRUE(FastTakes(json{{"v", 1}, {"id", 42}, {"model", "resnet"},
                             {"inputs", json::array({{{"dtype", "float32"}, {"shape", {2, 3}}}})}}
                            .dump()));
}

TEST(ProtocolFastPathTest, TakesNamedInputsAndLeavesOddNamesToTheJsonParser) {
  EXPECT_TRUE(FastTakes(R"({"v":1,"model":"m","inputs":[{"name":"y","dtype":"int8","shape":[1]},)"
                        R"({"dtype":"int8","name":"x:0.a-B_9","shape":[1]}]})"));
  EXPECT_TRUE(FastTakes(R"({"v":1,"model":"m","inputs":[{"dtype":"int8","shape":[1],"name":")" +
                        std::string(64, 'n') + R"("}]})"));
  for (const std::string& name :
       {std::string(65, 'n'), std::string(), std::string("a b"), std::string("a\\b"),
        std::string("\\u0078"), std::string("\xc3\xa9")}) {
    EXPECT_FALSE(FastTakes(R"({"v":1,"model":"m","inputs":[{"name":")" + name +
                           R"(","dtype":"int8","shape":[1]}]})"))
        << name;
  }
  // Every input named or none; a repeated name key.
  EXPECT_FALSE(FastTakes(R"({"v":1,"model":"m","inputs":[{"name":"y","dtype":"int8","shape":[1]},)"
                         R"({"dtype":"int8","shape":[1]}]})"));
  EXPECT_FALSE(FastTakes(R"({"v":1,"model":"m","inputs":[{"dtype":"int8","shape":[1]},)"
                         R"({"name":"y","dtype":"int8","shape":[1]}]})"));
  EXPECT_FALSE(FastTakes(R"({"v":1,"model":"m","inputs":[{"name":"y","name":"z","dtype":"int8",)"
                         R"("shape":[1]}]})"));
  EXPECT_FALSE(FastTakes(R"({"v":1,"model":"m","inputs":[{"name":7,"dtype":"int8","shape":[1]}]})"));
}

TEST(ProtocolFastPathTest, TakesAVersionAndLeavesOddOnesToTheJsonParser) {
  const std::string tail = R"(,"inputs":[{"dtype":"int8","shape":[1]}]})";
  EXPECT_TRUE(FastTakes(R"({"v":1,"model":"m","version":"2")" + tail));
  EXPECT_TRUE(FastTakes(R"({"v":1,"version":"v1.2-rc_3","model":"m")" + tail));
  EXPECT_TRUE(FastTakes(R"({"v":1,"model":"m","version":")" + std::string(32, '9') + "\"" + tail));
  for (const std::string& version :
       std::vector<std::string>{R"("")", "\"" + std::string(33, '9') + "\"", R"("a b")", R"("a/b")",
                                R"(2)", R"(null)", R"("\u0032")"}) {
    EXPECT_FALSE(FastTakes(R"({"v":1,"model":"m","version":)" + version + tail)) << version;
  }
  EXPECT_FALSE(FastTakes(R"({"v":1,"model":"m","version":"1","version":"2")" + tail));
  RequestHeader header;
  ASSERT_TRUE(ParseRequestHeader(R"({"v":1,"model":"m","version":"7")" + tail, &header).ok());
  EXPECT_EQ(header.version, "7");
  Status s = ParseRequestHeader(R"({"v":1,"model":"m","version":2)" + tail, &header);
  EXPECT_EQ(s.message(),
            "header field 'version': expected a string of 1..32 letters, digits, "
            "'_', '-' or '.', got 2");
  ASSERT_TRUE(ParseRequestHeader(R"({"v":1,"model":"m","version":null)" + tail, &header).ok());
  EXPECT_EQ(header.version, "") << "null: the default version";
}

TEST(ProtocolFastPathTest, LeavesEverythingElseToTheJsonParser) {
  const std::vector<std::string> declined = {
      "",
      "[]",
      "{}",
      R"({"v":2,"model":"m","inputs":[{"dtype":"float32","shape":[1]}]})",
      R"({"v":1.0,"model":"m","inputs":[{"dtype":"float32","shape":[1]}]})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1.0]}]})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1e2]}]})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[-1]}]})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[01]}]})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float33","shape":[1]}]})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1],"name":"x y"}]})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","dtype":"int8","shape":[1]}]})",
      R"({"v":1,"model":"m","inputs":[]})",
      R"({"v":1,"model":"","inputs":[{"dtype":"float32","shape":[1]}]})",
      R"({"v":1,"model":"m\u0041","inputs":[{"dtype":"float32","shape":[1]}]})",
      R"({"v":1,"model":"m","model":"n","inputs":[{"dtype":"float32","shape":[1]}]})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"extra":1})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}]} x)",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}])",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"id":-3})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"id":1.5})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"id":"a\"b"})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"id":"é"})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"id":[1]})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"id":1234567890123456789})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"timeout_ms":-1})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"timeout_ms":9223372036854775808})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"timeout_ms":18446744073709551615})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"priority":1001})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"deadline_unix_us":-1})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"deadline_unix_us":9223372036854775808})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"deadline_unix_us":1.5})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"deadline_unix_us":"1"})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"deadline_unix_us":1,"deadline_unix_us":2})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"id":nul})",
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1,2,3,4,5,6,7,8,9]}]})",
      R"({"model":"m","inputs":[{"dtype":"float32","shape":[1]}]})",
      std::string(R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}]})") + '\0',
  };
  for (const std::string& text : declined) EXPECT_FALSE(FastTakes(text)) << text;
}

// A client deadline (deadline_unix_us) is read by the fast path exactly as the JSON path reads
// it, at its bounds and beside the other optional fields.
TEST(ProtocolFastPathTest, TakesAClientDeadlineAsTheJsonPathDoes) {
  for (const std::string& value : {"0", "1", "1733550000123456", "9223372036854775807", "null"}) {
    const std::string text =
        R"({"v":1,"id":7,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"timeout_ms":20,"deadline_unix_us":)" +
        value + R"(,"priority":3})";
    // 19 digits are past what the scanner reads itself: the JSON path takes those.
    EXPECT_EQ(FastTakes(text), value.size() < 19) << text;
  }
  RequestHeader header;
  ASSERT_TRUE(ParseRequestHeaderFast(
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1]}],"deadline_unix_us":1733550000123456})",
      &header));
  EXPECT_EQ(header.deadline_unix_us, 1733550000123456);
}

TEST(ProtocolFastPathTest, DeclinesWhatTheLimitsRefuse) {
  const std::string text =
      R"({"v":1,"model":"m","inputs":[{"dtype":"float32","shape":[1,2,3]},{"dtype":"int8","shape":[1]}]})";
  RequestLimits rank;
  rank.max_rank = 2;
  EXPECT_FALSE(FastTakes(text, rank));
  RequestLimits inputs;
  inputs.max_inputs = 1;
  EXPECT_FALSE(FastTakes(text, inputs));
  RequestLimits bytes;
  bytes.max_header_bytes = 20;
  EXPECT_FALSE(FastTakes(text, bytes));
  EXPECT_TRUE(FastTakes(text));
}

TEST(ProtocolFastPathTest, OkReplyEchoesEveryKindOfId) {
  for (const json& id : {json(7u), json(nullptr), json("a b"), json(-4), json(1.5),
                         json::array({1, "x"}), json(true)}) {
    std::string reply = MakeOkReply(id, {TensorSpec{DType::kFloat32, {1, 2}}}, StageTimes{}, 3);
    ReplyHeader parsed;
    ASSERT_TRUE(ParseReplyHeader(reply, &parsed).ok()) << reply;
    EXPECT_EQ(parsed.id, id) << reply;
    EXPECT_EQ(reply.find("{\"v\":1,\"id\":" + id.dump() + ","), 0u) << reply;
  }
}

}  // namespace
}  // namespace torchfarm
