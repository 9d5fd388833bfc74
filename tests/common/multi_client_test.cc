// MultiClient against scripted in-test ROUTER servers (no supervisor): spreading, ejection of a
// silent server with re-sending, probing back in, refusals, deadlines, duplicate replies.
#include "torchfarm/multi_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace torchfarm {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A ROUTER on 127.0.0.1 answering on its own thread as `mode` says. Probes (model "") get
// INVALID_ARGUMENT like the supervisor's answer, in every mode but kSilent.
class ScriptedServer {
 public:
  enum class Mode { kEcho, kSilent, kRefuse, kEchoTwice };

  explicit ScriptedServer(Mode mode) : mode_(mode) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind("tcp://127.0.0.1:*");
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedServer() {
    stopping_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }
  void set_mode(Mode mode) { mode_ = mode; }
  int requests() const { return requests_; }  // model requests received (not probes)
  int probes() const { return probes_; }

 private:
  void Serve() {
    while (!stopping_) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(10));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(socket_, std::back_inserter(frames))) continue;
      Answer(frames);
    }
  }

  void Answer(std::vector<zmq::message_t>& frames) {
    const json header = json::parse(frames[1].to_string());
    const bool probe = header["model"] == "";
    (probe ? probes_ : requests_)++;
    const Mode mode = mode_;
    if (mode == Mode::kSilent) return;
    std::vector<zmq::message_t> reply;
    reply.emplace_back(frames[0].data(), frames[0].size());
    if (probe || mode == Mode::kRefuse) {
      Status error = probe ? InvalidArgument("no model") : ResourceExhausted("queue full");
      reply.emplace_back(MakeErrorReply(header["id"], error));
    } else {
      std::vector<TensorSpec> outputs;
      for (const auto& input : header["inputs"]) {
        TensorSpec spec;
        TensorSpecFromJson(input, "echo", false, &spec);
        outputs.push_back(spec);
      }
      reply.emplace_back(MakeOkReply(header["id"], outputs, StageTimes{1, 2, 3}, 0));
      for (size_t i = 2; i < frames.size(); ++i) reply.emplace_back(frames[i].to_string_view());
    }
    const int copies = mode == Mode::kEchoTwice && !probe ? 2 : 1;
    for (int c = 0; c < copies; ++c) {
      std::vector<zmq::message_t> copy;
      for (auto& m : reply) copy.emplace_back(m.data(), m.size());
      zmq::send_multipart(socket_, copy);
    }
  }

  zmq::context_t context_{1};
  zmq::socket_t socket_{context_, zmq::socket_type::router};
  std::string endpoint_;
  std::atomic<Mode> mode_;
  std::atomic<int> requests_{0};
  std::atomic<int> probes_{0};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

MultiClientOptions FastOptions() {
  MultiClientOptions o;
  o.io_timeout_ms = 5000;
  o.heartbeat_ms = 100;
  o.eject_after_ms = 300;
  o.probe_backoff_ms = 50;
  o.max_probe_backoff_ms = 200;
  o.refusal_cooldown_ms = 500;
  return o;
}

struct Input {
  std::vector<int32_t> values;
  TensorView view() const {
    return {{DType::kInt32, {static_cast<int64_t>(values.size())}},
            values.data(),
            values.size() * sizeof(int32_t)};
  }
};

int32_t FirstValue(const InferResult& result) {
  int32_t v = -1;
  if (!result.outputs.empty() && result.outputs[0].data.size() >= sizeof(v)) {
    std::memcpy(&v, result.outputs[0].data.data(), sizeof(v));
  }
  return v;
}

// Sends `count` requests pipelined and checks every one comes back once with its own value.
void SendAndCheckAll(MultiClient& client, int count) {
  std::map<uint64_t, int32_t> expected;
  for (int i = 0; i < count; ++i) {
    Input input{{i, i + 1}};
    uint64_t id = 0;
    ASSERT_TRUE(client.Send("echo", {input.view()}, {}, &id).ok());
    expected[id] = i;
  }
  for (int i = 0; i < count; ++i) {
    InferResult result;
    uint64_t id = 0;
    Status s = client.Receive(&result, &id, 10000);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(expected.count(id), 1u) << "id " << id << " answered twice or never sent";
    EXPECT_EQ(FirstValue(result), expected[id]);
    expected.erase(id);
  }
  EXPECT_EQ(client.outstanding(), 0u);
}

TEST(MultiClientTest, SpreadsRequestsOverEveryServer) {
  ScriptedServer a(ScriptedServer::Mode::kEcho), b(ScriptedServer::Mode::kEcho);
  MultiClient client({a.endpoint(), b.endpoint()}, FastOptions());
  ASSERT_TRUE(client.connect_status().ok());
  SendAndCheckAll(client, 40);
  EXPECT_GE(a.requests(), 10);
  EXPECT_GE(b.requests(), 10);
  Input input{{7}};
  InferResult result;
  ASSERT_TRUE(client.Infer("echo", {input.view()}, &result).ok());
  EXPECT_EQ(FirstValue(result), 7);
}

TEST(MultiClientTest, SilentServerIsEjectedAndItsRequestsResent) {
  ScriptedServer live(ScriptedServer::Mode::kEcho), silent(ScriptedServer::Mode::kSilent);
  MultiClient client({silent.endpoint(), live.endpoint()}, FastOptions());
  const auto start = std::chrono::steady_clock::now();
  SendAndCheckAll(client, 20);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_GE(silent.requests(), 1) << "the silent server got its share first";
  auto status = client.endpoint_status();
  EXPECT_FALSE(status[0].live);
  EXPECT_EQ(status[0].ejections, 1u);
  EXPECT_TRUE(status[1].live);

  silent.set_mode(ScriptedServer::Mode::kEcho);  // it recovers: a probe brings it back
  for (int i = 0; i < 100 && !client.endpoint_status()[0].live; ++i) {
    Input input{{i}};
    InferResult result;
    ASSERT_TRUE(client.Infer("echo", {input.view()}, &result).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(client.endpoint_status()[0].live);
  EXPECT_EQ(client.endpoint_status()[0].readmissions, 1u);
  const int before = silent.requests();
  SendAndCheckAll(client, 20);
  EXPECT_GT(silent.requests(), before) << "back in rotation";
}

TEST(MultiClientTest, RefusedRequestGoesToAnotherServer) {
  ScriptedServer full(ScriptedServer::Mode::kRefuse), ok(ScriptedServer::Mode::kEcho);
  MultiClient client({full.endpoint(), ok.endpoint()}, FastOptions());
  for (int i = 0; i < 5; ++i) {
    Input input{{i}};
    InferResult result;
    Status s = client.Infer("echo", {input.view()}, &result);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(FirstValue(result), i);
  }
  EXPECT_EQ(full.requests(), 1) << "after one refusal it cools down and is picked last";
}

TEST(MultiClientTest, RefusalIsReturnedWhenEveryServerRefuses) {
  ScriptedServer a(ScriptedServer::Mode::kRefuse), b(ScriptedServer::Mode::kRefuse);
  MultiClient client({a.endpoint(), b.endpoint()}, FastOptions());
  Input input{{1}};
  InferResult result;
  Status s = client.Infer("echo", {input.view()}, &result);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(a.requests() + b.requests(), 2);
}

TEST(MultiClientTest, DuplicateRepliesAreDropped) {
  ScriptedServer twice(ScriptedServer::Mode::kEchoTwice);
  MultiClient client({twice.endpoint()}, FastOptions());
  SendAndCheckAll(client, 10);
  InferResult result;
  uint64_t id = 0;
  EXPECT_EQ(client.Receive(&result, &id, 100).code(), StatusCode::kInvalidArgument);
}

TEST(MultiClientTest, NoServerAnswersIsDeadlineExceeded) {
  ScriptedServer a(ScriptedServer::Mode::kSilent), b(ScriptedServer::Mode::kSilent);
  MultiClientOptions options = FastOptions();
  options.io_timeout_ms = 800;
  MultiClient client({a.endpoint(), b.endpoint()}, options);
  Input input{{1}};
  InferResult result;
  const auto start = std::chrono::steady_clock::now();
  Status s = client.Infer("echo", {input.view()}, &result);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("no reply within 800 ms"));
  EXPECT_THAT(s.message(), HasSubstr(a.endpoint()));
  EXPECT_THAT(s.message(), HasSubstr(b.endpoint()));
  EXPECT_GE(elapsed, std::chrono::milliseconds(790));
  EXPECT_LT(elapsed, std::chrono::milliseconds(1500));
}

TEST(MultiClientTest, InvalidEndpointsAreReported) {
  MultiClient none({}, FastOptions());
  EXPECT_EQ(none.connect_status().code(), StatusCode::kInvalidArgument);
  MultiClient bad({"tcp://127.0.0.1:1", "nonsense"}, FastOptions());
  EXPECT_EQ(bad.connect_status().code(), StatusCode::kInvalidArgument);
  InferResult result;
  Input input{{1}};
  EXPECT_EQ(bad.Infer("echo", {input.view()}, &result).code(), StatusCode::kInvalidArgument);
  MultiClientOptions curve = FastOptions();
  curve.security.server_public_key = "too short";
  MultiClient bad_keys({"tcp://127.0.0.1:1"}, curve);
  EXPECT_EQ(bad_keys.connect_status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace torchfarm
