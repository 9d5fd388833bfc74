// AdminClient against an in-test ROUTER (the supervisor's socket type), with REQ framing.
#include "tools/admin_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace torchfarm {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// Answers one request with `reply(request text)` on its own thread; "" means no answer.
class FakeAdmin {
 public:
  explicit FakeAdmin(std::function<std::string(const std::string&)> reply,
                     const std::string& bind = "tcp://127.0.0.1:*")
      : context_(1), socket_(context_, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind(bind);
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this, reply = std::move(reply)] {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(5000));
      if (!(item.revents & ZMQ_POLLIN)) return;
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(socket_, std::back_inserter(frames))) return;
      request_ = frames.back().to_string();
      envelope_size_ = frames.size();
      std::string answer = reply(request_);
      if (answer.empty()) return;
      frames.back() = zmq::message_t(answer.data(), answer.size());
      zmq::send_multipart(socket_, frames);
    });
  }
  ~FakeAdmin() { thread_.join(); }

  const std::string& endpoint() const { return endpoint_; }
  // Valid once the client's call returned.
  const std::string& request() const { return request_; }
  size_t envelope_size() const { return envelope_size_; }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
  std::string endpoint_;
  std::thread thread_;
  std::string request_;
  size_t envelope_size_ = 0;
};

TEST(AdminClientTest, SendsOneJsonFrameAndParsesTheReply) {
  FakeAdmin server([](const std::string&) { return R"({"live": true, "ready": true})"; });
  AdminClient client(server.endpoint(), 2000);
  json reply;
  Status s = client.Call({{"cmd", "scale"}, {"model", "mlp"}, {"count", 3}}, &reply);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(reply["ready"], true);
  EXPECT_EQ(json::parse(server.request()),
            (json{{"cmd", "scale"}, {"model", "mlp"}, {"count", 3}}));
  // identity, REQ's empty delimiter, the JSON frame: what the supervisor's ROUTER expects.
  EXPECT_EQ(server.envelope_size(), 3u);
}

TEST(AdminClientTest, NoAnswerIsUnavailableWithAHint) {
  FakeAdmin server([](const std::string&) { return ""; });
  AdminClient client(server.endpoint(), 200);
  json reply;
  auto start = std::chrono::steady_clock::now();
  Status s = client.Command("stats", &reply);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            "no answer from " + server.endpoint() + " within 200 ms; is the supervisor running?");
  EXPECT_TRUE(reply.is_null());
}

TEST(AdminClientTest, MissingIpcSocketFailsAtOnce) {
  AdminClient client("ipc:///nonexistent-dir-torchfarm/admin.sock", 5000);
  json reply;
  auto start = std::chrono::steady_clock::now();
  Status s = client.Command("health", &reply);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("no answer from ipc:///nonexistent-dir-torchfarm/admin.sock"));
  EXPECT_THAT(s.message(), HasSubstr("does not exist; is the supervisor running"));
}

TEST(AdminClientTest, WorksOverIpc) {
  std::string path = "/tmp/tf-admin-client-test-" + std::to_string(::getpid()) + ".sock";
  {
    FakeAdmin server([](const std::string&) { return R"({"ok": true, "message": "done"})"; },
                     "ipc://" + path);
    AdminClient client("ipc://" + path);
    json reply;
    ASSERT_TRUE(client.Command("drain", &reply).ok());
    EXPECT_EQ(AdminReplyError(reply), "");
  }
  ::unlink(path.c_str());
}

TEST(AdminClientTest, MalformedEndpointAndReply) {
  json reply;
  EXPECT_EQ(AdminClient("nonsense://x").Command("stats", &reply).code(),
            StatusCode::kInvalidArgument);
  FakeAdmin server([](const std::string&) { return "not json"; });
  Status s = AdminClient(server.endpoint()).Command("stats", &reply);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("not json"));
}

TEST(AdminClientTest, ReplyErrors) {
  EXPECT_EQ(AdminReplyError(json{{"ok", true}, {"message", "m"}}), "");
  EXPECT_EQ(AdminReplyError(json{{"live", true}}), "");
  EXPECT_EQ(AdminReplyError(json{{"ok", false}, {"error", "no such model"}}), "no such model");
  EXPECT_EQ(AdminReplyError(json{{"error", "unknown cmd"}}), "unknown cmd");
  EXPECT_THAT(AdminReplyError(json{{"ok", false}}), HasSubstr("refused"));
}

}  // namespace
}  // namespace torchfarm
