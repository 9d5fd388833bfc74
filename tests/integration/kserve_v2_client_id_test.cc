// frontend.client_id_header against the real supervisor and worker: v2 requests over HTTP and gRPC
// that carry the same X-Tenant value are one client, the same one as the ZeroMQ client whose
// routing id is that value, so limits.max_queued_per_client (1 here) refuses the others while
// one of them runs, and serves requests of another tenant or of no tenant; a hostile value is
// refused naming the header and the next request on the same connection (or gRPC channel) gets
// the right answer. The key is spelled "X-Tenant" in the config: gRPC's lowercase metadata key
// still finds it.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "proto/grpc_service.grpc.pb.h"
#include "tests/integration/farm_fixture.h"
#include "tests/integration/http_test_client.h"

namespace torchfarm {
namespace {

namespace http = boost::beast::http;
using nlohmann::json;
using testing::Farm;
using testing::HttpReply;
using Clock = std::chrono::steady_clock;

constexpr const char* kInfer = "/v2/models/slow/infer";
// The slow model runs int(x[:, 0].max()) 128x128 matmuls: ~0.04-0.1 ms each on one core, so
// this many hold the worker for a few seconds, long enough for the refusals to come while it runs.
constexpr float kLongRun = 60'000;

// The slow model's input [1, 4]: `first` then 1, 2, 3 (the answer is the input unchanged).
std::vector<float> Row(float first) { return {first, 1, 2, 3}; }

std::string Body(float first) {
  return json{
      {"inputs",
       {{{"name", "INPUT__0"}, {"datatype", "FP32"}, {"shape", {1, 4}}, {"data", Row(first)}}}}}
      .dump();
}

// The answer's values when `reply` is a 200 with one output; else empty.
std::vector<float> Values(const HttpReply& reply) {
  const json j = reply.Json();
  if (reply.status != 200 || !j.is_object() || !j.contains("outputs")) return {};
  return j["outputs"][0]["data"].get<std::vector<float>>();
}

std::string ErrorOf(const HttpReply& reply) {
  const json j = reply.Json();
  return j.is_object() ? j.value("error", "") : reply.body;
}

class V2ClientId : public ::testing::Test {
 protected:
  void SetUp() override {
    json extra = {{"http_endpoint", "127.0.0.1:0"},
                  {"grpc_endpoint", "127.0.0.1:0"},
                  {"frontend", {{"client_id_header", "X-Tenant"}}},
                  {"limits", {{"max_queued_per_client", 1}}}};
    farm_ = std::make_unique<Farm>(
        json::array({testing::ModelEntry("slow", "slow.pt", {-1, 4}, 1)}), extra);
    ASSERT_TRUE(farm_->Start());
    ASSERT_TRUE(farm_->WaitReady()) << farm_->error();
    const json stats = farm_->Admin("stats");
    http_port_ = stats.at("frontend").at("http").at("port").get<int>();
    grpc_port_ = stats.at("frontend").at("grpc").at("port").get<int>();
    // The first runs of a TorchScript model are its profiling runs: out of the way.
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(Post(Body(1), {}).status, 200);
    }
  }

  void TearDown() override {
    if (!farm_) return;
    const json stats = farm_->Admin("stats");
    EXPECT_EQ(stats.at("frontend").value("unmatched_replies", uint64_t{99}), 0u);
    EXPECT_EQ(stats["workers"][0]["restarts"], 0) << "no client costs a worker";
    EXPECT_EQ(farm_->Stop(), 0);
  }

  HttpReply Post(const std::string& body, const std::map<std::string, std::string>& headers,
                 std::chrono::milliseconds bound = std::chrono::seconds(10)) {
    return testing::HttpOnce(http_port_, http::verb::post, kInfer, body, headers, bound);
  }

  std::unique_ptr<inference::GRPCInferenceService::Stub> GrpcStub() {
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);  // a connection of its own
    return inference::GRPCInferenceService::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(grpc_port_), grpc::InsecureChannelCredentials(), args));
  }

  static inference::ModelInferRequest GrpcRequest(float first) {
    inference::ModelInferRequest request;
    request.set_model_name("slow");
    auto* input = request.add_inputs();
    input->set_name("INPUT__0");
    input->set_datatype("FP32");
    input->add_shape(1);
    input->add_shape(4);
    const std::vector<float> values = Row(first);
    request.add_raw_input_contents(reinterpret_cast<const char*>(values.data()),
                                   values.size() * sizeof(float));
    return request;
  }

  // A unary ModelInfer with `tenant` as X-Tenant metadata (none when empty); *values gets the
  // answer.
  grpc::Status GrpcInfer(inference::GRPCInferenceService::Stub& stub, const std::string& tenant,
                         float first, std::vector<float>* values = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!tenant.empty()) context.AddMetadata("x-tenant", tenant);
    inference::ModelInferResponse response;
    grpc::Status status = stub.ModelInfer(&context, GrpcRequest(first), &response);
    if (values && status.ok() && response.raw_output_contents_size() == 1) {
      const std::string& raw = response.raw_output_contents(0);
      values->assign(reinterpret_cast<const float*>(raw.data()),
                     reinterpret_cast<const float*>(raw.data() + raw.size()));
    }
    return status;
  }

  // True once the worker holds a request (stats' inflight), within 10 s.
  bool WorkerBusy() {
    const auto give_up = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < give_up) {
      const json stats = farm_->Admin("stats");
      if (stats.is_object() && stats["workers"][0].value("inflight", 0) > 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  std::unique_ptr<Farm> farm_;
  int http_port_ = 0;
  int grpc_port_ = 0;
};

// The ZeroMQ client with routing id `id`: one request of Row(first); its reply's "code" ("" when
// ok) and message.
std::pair<std::string, std::string> ZmqInfer(const std::string& endpoint, const std::string& id,
                                             float first) {
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, 30'000);
  socket.set(zmq::sockopt::routing_id, id);
  socket.connect(endpoint);
  const json header = {{"v", 1},
                       {"id", 1},
                       {"model", "slow"},
                       {"inputs", {{{"dtype", "float32"}, {"shape", {1, 4}}}}}};
  const std::vector<float> values = Row(first);
  socket.send(zmq::buffer(header.dump()), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(values), zmq::send_flags::none);
  zmq::message_t reply;
  if (!socket.recv(reply)) return {"no reply", ""};
  const json j = json::parse(reply.to_string_view(), nullptr, false);
  while (reply.more()) (void)socket.recv(reply);
  return {j.value("status", "") == "ok" ? "" : j.value("code", "?"), j.value("message", "")};
}

TEST_F(V2ClientId, OneTenantOverHttpGrpcAndZeroMqIsOneClientOfTheQuota) {
  // Tenant gold's long request holds the worker, and gold's one place in the quota.
  std::atomic<bool> long_done{false};
  HttpReply long_reply;
  std::thread long_run([&] {
    long_reply = Post(Body(kLongRun), {{"X-Tenant", "tenant-gold"}}, std::chrono::seconds(120));
    long_done = true;
  });
  if (!WorkerBusy() || long_done) {
    long_run.join();
    FAIL() << "the long request was not running when the test needed it: " << long_reply.status
           << " " << long_reply.body;
  }

  // Gold again, on another HTTP connection, in another spelling of the header: refused at once.
  const HttpReply http_gold = Post(Body(2), {{"x-tenant", "tenant-gold"}});
  EXPECT_EQ(http_gold.status, 429) << http_gold.body;
  EXPECT_NE(ErrorOf(http_gold).find("this client already has 1 requests queued or running"),
            std::string::npos)
      << http_gold.body;
  EXPECT_NE(ErrorOf(http_gold).find("limits.max_queued_per_client"), std::string::npos);
  // Gold over gRPC, and as the ZeroMQ client whose routing id is "tenant-gold".
  auto stub = GrpcStub();
  grpc::Status grpc_gold = GrpcInfer(*stub, "tenant-gold", 3);
  EXPECT_EQ(grpc_gold.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << grpc_gold.error_message();
  EXPECT_NE(grpc_gold.error_message().find("limits.max_queued_per_client"), std::string::npos);
  const auto [zmq_code, zmq_message] = ZmqInfer(farm_->endpoint(), "tenant-gold", 4);
  EXPECT_EQ(zmq_code, "RESOURCE_EXHAUSTED") << zmq_message;
  EXPECT_FALSE(long_done) << "the refusals above must come while gold's long request runs";

  // Other clients are queued behind it, not refused: another tenant over HTTP and over gRPC, an
  // unnamed HTTP request (its connection), and another ZeroMQ routing id.
  HttpReply silver, unnamed;
  std::vector<float> grpc_silver_values;
  grpc::Status grpc_silver;
  std::pair<std::string, std::string> zmq_other;
  std::vector<std::thread> others;
  others.emplace_back([&] {
    silver = Post(Body(5), {{"X-Tenant", "tenant-silver"}}, std::chrono::seconds(120));
  });
  others.emplace_back([&] { unnamed = Post(Body(6), {}, std::chrono::seconds(120)); });
  others.emplace_back([&] {
    auto other_stub = GrpcStub();
    grpc_silver = GrpcInfer(*other_stub, "tenant-bronze", 7, &grpc_silver_values);
  });
  others.emplace_back([&] { zmq_other = ZmqInfer(farm_->endpoint(), "tenant-iron", 8); });
  for (auto& t : others) t.join();
  long_run.join();
  EXPECT_EQ(Values(long_reply), Row(kLongRun)) << long_reply.status << " " << long_reply.body;
  EXPECT_EQ(Values(silver), Row(5)) << silver.status << " " << silver.body;
  EXPECT_EQ(Values(unnamed), Row(6)) << unnamed.status << " " << unnamed.body;
  EXPECT_TRUE(grpc_silver.ok()) << grpc_silver.error_message();
  EXPECT_EQ(grpc_silver_values, Row(7));
  EXPECT_EQ(zmq_other.first, "") << zmq_other.second;

  // Gold's request is answered: gold is served again, over each protocol.
  const HttpReply again = Post(Body(9), {{"X-Tenant", "tenant-gold"}});
  EXPECT_EQ(Values(again), Row(9)) << again.status << " " << again.body;
  std::vector<float> grpc_again;
  grpc_gold = GrpcInfer(*stub, "tenant-gold", 10, &grpc_again);
  EXPECT_TRUE(grpc_gold.ok()) << grpc_gold.error_message();
  EXPECT_EQ(grpc_again, Row(10));
  EXPECT_EQ(ZmqInfer(farm_->endpoint(), "tenant-gold", 11).first, "");
}

TEST_F(V2ClientId, AHostileValueIsRefusedAndTheSameConnectionIsServedNext) {
  const std::string expected =
      "x-tenant: expected 1..255 visible ASCII characters naming the client "
      "(frontend.client_id_header), got ";
  testing::HttpKeepAlive connection(http_port_);
  const HttpReply long_value =
      connection.Send(http::verb::post, kInfer, Body(2), {{"X-Tenant", std::string(300, 'g')}});
  EXPECT_EQ(long_value.status, 400) << long_value.body;
  EXPECT_EQ(ErrorOf(long_value), expected + "300 bytes");
  const HttpReply good = connection.Send(http::verb::post, kInfer, Body(3), {{"X-Tenant", "gold"}});
  EXPECT_EQ(Values(good), Row(3)) << good.status << " " << good.body;
  const HttpReply empty = connection.Send(http::verb::post, kInfer, Body(4), {{"X-Tenant", ""}});
  EXPECT_EQ(empty.status, 400) << empty.body;
  EXPECT_EQ(ErrorOf(empty), expected + "an empty value");
  const HttpReply unnamed = connection.Send(http::verb::post, kInfer, Body(5));
  EXPECT_EQ(Values(unnamed), Row(5)) << unnamed.status << " " << unnamed.body;

  // gRPC: refused INVALID_ARGUMENT, then the same channel's next call is served.
  auto stub = GrpcStub();
  grpc::Status status = GrpcInfer(*stub, "tenant gold", 6);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_EQ(status.error_message(), expected + "11 bytes with byte 0x20 at offset 6");
  std::vector<float> values;
  status = GrpcInfer(*stub, "tenant-gold", 7, &values);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(values, Row(7));

  // A stream named by its metadata is served; one named badly answers each request with the
  // refusal, and a new stream on the same channel is served.
  for (const std::string& tenant : {std::string(256, 'g'), std::string("tenant-gold")}) {
    grpc::ClientContext context;
    context.AddMetadata("x-tenant", tenant);
    auto stream = stub->ModelStreamInfer(&context);
    ASSERT_TRUE(stream->Write(GrpcRequest(8)));
    inference::ModelStreamInferResponse response;
    ASSERT_TRUE(stream->Read(&response));
    if (tenant.size() == 256) {
      EXPECT_EQ(response.error_message(), expected + "256 bytes");
    } else {
      EXPECT_EQ(response.error_message(), "");
      ASSERT_EQ(response.infer_response().raw_output_contents_size(), 1);
      const std::string& raw = response.infer_response().raw_output_contents(0);
      EXPECT_EQ(std::vector<float>(reinterpret_cast<const float*>(raw.data()),
                                   reinterpret_cast<const float*>(raw.data() + raw.size())),
                Row(8));
    }
    ASSERT_TRUE(stream->WritesDone());
    EXPECT_TRUE(stream->Finish().ok());
  }
}

}  // namespace
}  // namespace torchfarm
