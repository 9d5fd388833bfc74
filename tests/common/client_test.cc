// Client against a scripted in-test ROUTER server (no supervisor, no worker processes).
#include "torchfarm/client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <memory>

#include "fake_server.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using testing::Bytes;
using testing::EchoForever;
using testing::FakeServer;
using ::testing::HasSubstr;
using testing::kServerWaitMs;
using testing::View;

TEST(ClientTest, InferRoundTrip) {
  FakeServer::Request seen;
  auto server = std::make_unique<FakeServer>([&seen](FakeServer& s) {
    ASSERT_TRUE(s.Receive(&seen));
    s.ReplyEcho(seen);
  });
  Client client(server->endpoint(), kServerWaitMs);
  ASSERT_TRUE(client.connect_status().ok());
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> b = {42};
  InferResult result;
  Status s = client.Infer("echo", {View(a, DType::kFloat32, {2, 3}), View(b, DType::kInt64, {})},
                          &result, InferOptions{250, 3});
  ASSERT_TRUE(s.ok()) << s.ToString();
  server.reset();  // joins: `seen` is complete

  EXPECT_EQ(seen.header["v"], 1);
  EXPECT_EQ(seen.header["model"], "echo");
  EXPECT_EQ(seen.header["timeout_ms"], 250);
  EXPECT_EQ(seen.header["priority"], 3);
  EXPECT_EQ(seen.header["inputs"][0]["shape"], json({2, 3}));
  RequestHeader parsed;  // what the client sends is what the supervisor accepts
  EXPECT_TRUE(ParseRequestHeader(seen.header.dump(), &parsed).ok());
  ASSERT_EQ(seen.data.size(), 2u);

  EXPECT_EQ(result.header.id, seen.header["id"]);
  EXPECT_EQ(result.header.worker_id, 7);
  EXPECT_EQ(result.header.timing.total_us, 3);
  ASSERT_EQ(result.outputs.size(), 2u);
  EXPECT_EQ(result.outputs[0].spec, (TensorSpec{DType::kFloat32, {2, 3}}));
  EXPECT_EQ(result.outputs[0].data, Bytes(a));
  EXPECT_EQ(result.outputs[1].spec, (TensorSpec{DType::kInt64, {}}));
  EXPECT_EQ(result.outputs[1].data, Bytes(b));
}

TEST(ClientTest, ServerErrorReplyKeepsCodeAndMessage) {
  FakeServer server([](FakeServer& s) {
    FakeServer::Request r;
    ASSERT_TRUE(s.Receive(&r));
    s.Reply(r.identity, MakeErrorReply(r.header["id"], NotFound("model 'nope' is not loaded")));
  });
  Client client(server.endpoint(), kServerWaitMs);
  std::vector<float> a = {1};
  InferResult result;
  Status s = client.Infer("nope", {View(a, DType::kFloat32, {1})}, &result);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "model 'nope' is not loaded");
  EXPECT_EQ(result.header.status.code(), StatusCode::kNotFound);
  EXPECT_EQ(result.header.raw["status"], "error");
  EXPECT_TRUE(result.outputs.empty());
}

TEST(ClientTest, NoReplyIsDeadlineExceeded) {
  FakeServer server([](FakeServer& s) {
    FakeServer::Request r;
    EXPECT_TRUE(s.Receive(&r));
    s.WaitUntilStopping();
  });
  Client client(server.endpoint(), 200);
  std::vector<float> a = {1, 2};
  InferResult result;
  auto start = std::chrono::steady_clock::now();
  Status s = client.Infer("slow", {View(a, DType::kFloat32, {2})}, &result);
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(), "no reply from " + server.endpoint() + " within 200 ms");
  EXPECT_GE(elapsed, std::chrono::milliseconds(190));
  EXPECT_TRUE(result.header.raw.is_null());
}

TEST(ClientTest, StaleReplyAfterTimeoutIsDropped) {
  FakeServer server([](FakeServer& s) {
    FakeServer::Request first, second;
    ASSERT_TRUE(s.Receive(&first));
    ASSERT_TRUE(s.Receive(&second));  // sent after the client gave up on `first`
    // The late answer to `first` and one with an id never used reach the same socket first.
    s.ReplyEcho(second, first);
    s.Reply(second.identity, MakeErrorReply(json(999), Internal("from nowhere")));
    s.ReplyEcho(second);
  });
  Client client(server.endpoint(), 300);
  std::vector<float> a = {1, 1};
  std::vector<float> b = {2, 2};
  InferResult result;
  EXPECT_EQ(client.Infer("m", {View(a, DType::kFloat32, {2})}, &result).code(),
            StatusCode::kDeadlineExceeded);
  ASSERT_EQ(client.io_timeout_ms(), 300);
  Status s = client.Infer("m", {View(b, DType::kFloat32, {2})}, &result);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(result.header.id, json(2));
  ASSERT_EQ(result.outputs.size(), 1u);
  EXPECT_EQ(result.outputs[0].data, Bytes(b));
}

TEST(ClientTest, PipelinedRepliesOutOfOrder) {
  FakeServer server([](FakeServer& s) {
    FakeServer::Request r[3];
    for (auto& request : r) ASSERT_TRUE(s.Receive(&request));
    s.ReplyEcho(r[2]);
    s.ReplyEcho(r[0]);
    s.ReplyEcho(r[1]);
  });
  Client client(server.endpoint(), kServerWaitMs);
  std::vector<std::vector<int32_t>> inputs = {{10}, {20, 21}, {30, 31, 32}};
  std::vector<uint64_t> ids;
  for (const auto& input : inputs) {
    uint64_t id = 0;
    ASSERT_TRUE(client
                    .Send("m", {View(input, DType::kInt32, {static_cast<int64_t>(input.size())})},
                          InferOptions{}, &id)
                    .ok());
    ids.push_back(id);
  }
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(client.outstanding(), 3u);
  for (size_t expected : {2, 0, 1}) {
    InferResult result;
    uint64_t id = 0;
    Status s = client.Receive(&result, &id, kServerWaitMs);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(id, ids[expected]);
    ASSERT_EQ(result.outputs.size(), 1u);
    EXPECT_EQ(result.outputs[0].data, Bytes(inputs[expected]));
  }
  EXPECT_EQ(client.outstanding(), 0u);
  InferResult result;
  uint64_t id = 7;
  EXPECT_EQ(client.Receive(&result, &id, 10).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(id, 0u);
}

TEST(ClientTest, ReplyToSendArrivingDuringInferIsKept) {
  FakeServer server([](FakeServer& s) {
    FakeServer::Request sent, inferred;
    ASSERT_TRUE(s.Receive(&sent));
    ASSERT_TRUE(s.Receive(&inferred));
    s.ReplyEcho(sent);
    s.ReplyEcho(inferred);
  });
  Client client(server.endpoint(), kServerWaitMs);
  std::vector<uint8_t> a = {1, 2, 3};
  std::vector<uint8_t> b = {9};
  uint64_t sent_id = 0;
  ASSERT_TRUE(client.Send("m", {View(a, DType::kUInt8, {3})}, {}, &sent_id).ok());
  InferResult result;
  ASSERT_TRUE(client.Infer("m", {View(b, DType::kUInt8, {1})}, &result).ok());
  EXPECT_EQ(result.outputs[0].data, Bytes(b));
  EXPECT_EQ(client.outstanding(), 1u);
  uint64_t id = 0;
  ASSERT_TRUE(client.Receive(&result, &id, 0).ok());
  EXPECT_EQ(id, sent_id);
  EXPECT_EQ(result.outputs[0].data, Bytes(a));
}

TEST(ClientTest, ReplyNotMatchingItsHeaderIsMalformed) {
  FakeServer server([](FakeServer& s) {
    FakeServer::Request r;
    ASSERT_TRUE(s.Receive(&r));
    std::vector<TensorSpec> outputs = {{DType::kFloat32, {2}}};
    s.Reply(r.identity, MakeOkReply(r.header["id"], outputs, {}, 0), {std::string(4, 'x')});
    ASSERT_TRUE(s.Receive(&r));
    s.Reply(r.identity, MakeOkReply(r.header["id"], outputs, {}, 0));
  });
  Client client(server.endpoint(), kServerWaitMs);
  std::vector<float> a = {1};
  InferResult result;
  Status s = client.Infer("m", {View(a, DType::kFloat32, {1})}, &result);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "malformed reply: outputs[0] float32 [2] needs 8 bytes, frame 1 has 4");
  s = client.Infer("m", {View(a, DType::kFloat32, {1})}, &result);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "malformed reply: header lists 1 output(s), message has 0 data frame(s)");
}

TEST(ClientTest, NoServerTimesOutAndReleasesQueuedInputs) {
  std::string endpoint = "ipc:///tmp/torchfarm_client_test_nobody_" + std::to_string(getpid());
  Client client(endpoint, 100);
  for (int attempt = 0; attempt < 2; ++attempt) {
    // The request can never leave: Infer must drop its zero-copy frames before returning, or
    // libzmq would later read this freed buffer.
    auto big = std::make_unique<std::vector<uint8_t>>(1 << 20, 7);
    InferResult result;
    Status s = client.Infer("m", {View(*big, DType::kUInt8, {1 << 20})}, &result);
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
    EXPECT_EQ(s.message(), "no reply from " + endpoint + " within 100 ms");
    EXPECT_TRUE(client.connect_status().ok());
  }
}

TEST(ClientTest, InvalidEndpointAndInputsAreReported) {
  Client bad("not-an-endpoint", 100);
  EXPECT_EQ(bad.connect_status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.connect_status().message(), HasSubstr("cannot connect to 'not-an-endpoint'"));
  std::vector<float> a = {1, 2};
  InferResult result;
  EXPECT_EQ(bad.Infer("m", {View(a, DType::kFloat32, {2})}, &result).code(),
            StatusCode::kInvalidArgument);

  FakeServer server(EchoForever);
  Client client(server.endpoint(), kServerWaitMs);
  Status s = client.Infer("m", {View(a, DType::kFloat32, {3})}, &result);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "inputs[0]: float32 [3] needs 12 bytes, got 8");
  // The client is still usable afterwards.
  EXPECT_TRUE(client.Infer("m", {View(a, DType::kFloat32, {2})}, &result).ok());
}

TEST(ClientTest, RawFramesForMalformedRequests) {
  FakeServer server([](FakeServer& s) {
    FakeServer::Request r;
    ASSERT_TRUE(s.Receive(&r));  // header "{}" parses as JSON
    s.Reply(r.identity, MakeErrorReply(nullptr, InvalidArgument("bad")), {"extra"});
  });
  Client client(server.endpoint(), kServerWaitMs);
  ASSERT_TRUE(client.SendRaw({"{}", "data"}).ok());
  std::vector<std::string> frames;
  ASSERT_TRUE(client.ReceiveRaw(&frames, kServerWaitMs).ok());
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(json::parse(frames[0])["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(frames[1], "extra");
  EXPECT_EQ(client.ReceiveRaw(&frames, 50).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(client.SendRaw({}).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace torchfarm
