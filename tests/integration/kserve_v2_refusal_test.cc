// Issue 35 item 1 against the real supervisor and workers: a v2 request that cannot become a farm
// job (a 3 MiB input name, 5,000 inputs, a 70,000-byte gRPC model_name) is answered at once with
// an error naming the limit and the value, its body leaves frontend.max_inflight_body_bytes at once
// (also when the client hangs up first), no reply is dropped for want of an id, and another
// client's good request right after succeeds.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "proto/grpc_service.grpc.pb.h"
#include "tests/integration/farm_fixture.h"
#include "tests/integration/http_test_client.h"

namespace torchfarm {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using nlohmann::json;
using testing::Farm;
using testing::ModelEntry;
using Clock = std::chrono::steady_clock;

constexpr auto kAtOnce = std::chrono::milliseconds(1000);

using Answer = testing::HttpReply;

// One POST on a fresh connection; the answer, or status 0 when none came within 10 s (a request
// the farm never answers must fail the test, not hang it).
Answer Post(int port, const std::string& target, const std::string& body) {
  return testing::HttpOnce(port, http::verb::post, target, body,
                           {{"Content-Type", "application/json"}});
}

// Sends a whole POST and hangs up without reading the answer.
void PostAndHangUp(int port, const std::string& target, const std::string& body) {
  asio::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  const std::string head =
      "POST " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n";
  asio::write(socket, asio::buffer(head));
  asio::write(socket, asio::buffer(body));
  socket.close();
}

json Input(const std::string& name, int64_t columns, float value = 0.5f) {
  return {{"name", name},
          {"datatype", "FP32"},
          {"shape", {1, columns}},
          {"data", std::vector<float>(static_cast<size_t>(columns), value)}};
}

std::string GoodBody(const std::string& id = "good") {
  return json{{"id", id}, {"inputs", {Input("INPUT__0", 256)}}}.dump();
}

std::string HugeNameBody() {
  return json{{"inputs", {Input(std::string(3 << 20, 'n'), 256)}}}.dump();
}

std::string ManyInputsBody() {
  json inputs = json::array();
  for (int i = 0; i < 5000; ++i) inputs.push_back(Input("in" + std::to_string(i), 1));
  return json{{"inputs", inputs}}.dump();
}

class V2Refusals : public ::testing::Test {
 protected:
  void StartFarm(json frontend = json::object()) {
    json extra = {{"http_endpoint", "127.0.0.1:0"}, {"grpc_endpoint", "127.0.0.1:0"}};
    if (!frontend.empty()) extra["frontend"] = frontend;
    farm_ = std::make_unique<Farm>(
        json::array({ModelEntry("mlp", "mlp.pt", {-1, 256}, 1, {{"max_batch_size", 8}})}), extra);
    ASSERT_TRUE(farm_->Start());
    ASSERT_TRUE(farm_->WaitReady());
    const json stats = farm_->Admin("stats");
    http_port_ = stats.at("frontend").at("http").at("port").get<int>();
    grpc_port_ = stats.at("frontend").at("grpc").at("port").get<int>();
  }

  // A good request from another client succeeds at once.
  void ExpectGoodHttp() {
    const Answer good = Post(http_port_, "/v2/models/mlp/infer", GoodBody());
    EXPECT_EQ(good.status, 200) << good.body.substr(0, 300);
    EXPECT_LT(good.took, kAtOnce);
  }

  std::unique_ptr<inference::GRPCInferenceService::Stub> GrpcStub() {
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(-1);
    args.SetInt("grpc.use_local_subchannel_pool", 1);  // a connection of its own
    return inference::GRPCInferenceService::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(grpc_port_), grpc::InsecureChannelCredentials(), args));
  }

  static inference::ModelInferRequest GrpcRequest(const std::string& model) {
    inference::ModelInferRequest request;
    request.set_model_name(model);
    auto* input = request.add_inputs();
    input->set_name("INPUT__0");
    input->set_datatype("FP32");
    input->add_shape(1);
    input->add_shape(256);
    const std::vector<float> values(256, 0.5f);
    request.add_raw_input_contents(reinterpret_cast<const char*>(values.data()),
                                   values.size() * sizeof(float));
    return request;
  }

  // After the test: every reply the loop sent found its call.
  void TearDown() override {
    if (!farm_) return;
    const json stats = farm_->Admin("stats");
    EXPECT_EQ(stats.at("frontend").value("unmatched_replies", uint64_t{99}), 0u);
  }

  std::unique_ptr<Farm> farm_;
  int http_port_ = 0;
  int grpc_port_ = 0;
};

TEST_F(V2Refusals, AThreeMebibyteInputNameIsRefusedAtOnceNamingTheLimit) {
  StartFarm();
  const Answer bad = Post(http_port_, "/v2/models/mlp/infer", HugeNameBody());
  EXPECT_EQ(bad.status, 400) << bad.body.substr(0, 300);
  EXPECT_LT(bad.took, kAtOnce);
  EXPECT_NE(bad.body.find("limits.max_header_bytes (65536)"), std::string::npos)
      << bad.body.substr(0, 300);
  EXPECT_NE(bad.body.find("3145728 bytes"), std::string::npos) << bad.body.substr(0, 300);
  ExpectGoodHttp();
}

TEST_F(V2Refusals, FiveThousandInputsAreRefusedAtOnceNamingTheLimit) {
  StartFarm();
  const Answer bad = Post(http_port_, "/v2/models/mlp/infer", ManyInputsBody());
  EXPECT_EQ(bad.status, 400) << bad.body.substr(0, 300);
  EXPECT_LT(bad.took, kAtOnce);
  EXPECT_NE(bad.body.find("expected at most 16 inputs"), std::string::npos) << bad.body;
  EXPECT_NE(bad.body.find("got 5000"), std::string::npos) << bad.body;
  ExpectGoodHttp();
}

TEST_F(V2Refusals, ASeventyThousandByteGrpcModelNameIsInvalidArgumentAtOnce) {
  StartFarm();
  auto bad_stub = GrpcStub();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  inference::ModelInferResponse response;
  const auto start = Clock::now();
  const grpc::Status status =
      bad_stub->ModelInfer(&context, GrpcRequest(std::string(70'000, 'm')), &response);
  EXPECT_LT(Clock::now() - start, kAtOnce);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("model_name is 70000 bytes"), std::string::npos)
      << status.error_message().substr(0, 300);
  EXPECT_NE(status.error_message().find("limits.max_header_bytes"), std::string::npos);

  auto good_stub = GrpcStub();
  grpc::ClientContext good_context;
  good_context.set_deadline(std::chrono::system_clock::now() + kAtOnce);
  const grpc::Status good = good_stub->ModelInfer(&good_context, GrpcRequest("mlp"), &response);
  EXPECT_TRUE(good.ok()) << good.error_message();
  EXPECT_EQ(response.raw_output_contents_size(), 1);
  ExpectGoodHttp();
}

// With a 4 MiB budget, refused requests (answered, or abandoned by clients that hung up) leave it
// at once: a 1.1 MiB request right after still gets 200, not 429.
TEST_F(V2Refusals, RefusedBodiesLeaveTheInflightBudgetAtOnce) {
  StartFarm({{"max_body_bytes", 4 << 20}, {"max_inflight_body_bytes", 4 << 20}});
  const std::string huge_name = HugeNameBody();
  const std::string many = ManyInputsBody();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Post(http_port_, "/v2/models/mlp/infer", huge_name).status, 400);
    EXPECT_EQ(Post(http_port_, "/v2/models/mlp/infer", many).status, 400);
  }
  for (int i = 0; i < 3; ++i) PostAndHangUp(http_port_, "/v2/models/mlp/infer", huge_name);
  // 1.1 MiB: a good request whose id carries the bulk.
  const std::string big = GoodBody(std::string(1'150'000, 'i'));
  const auto until = Clock::now() + kAtOnce;
  Answer answer;
  do {
    answer = Post(http_port_, "/v2/models/mlp/infer", big);
  } while (answer.status != 200 && Clock::now() < until);
  EXPECT_EQ(answer.status, 200) << answer.body.substr(0, 300);
}

}  // namespace
}  // namespace torchfarm
