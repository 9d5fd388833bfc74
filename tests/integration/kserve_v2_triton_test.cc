// Issue 30 against the real supervisor and workers, as a Triton client would meet them: gzip and
// deflate bodies (and hostile ones: a bomb, a truncated stream, a lying trailer, an unknown
// coding), KServe's "model_name" in the body, priorities as tritonclient sends them over gRPC
// (uint64_param), ModelReady of an unknown model, the model configuration and statistics. Each
// hostile request is followed by a good one that must succeed.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
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

using Reply = testing::HttpReply;

// One request on a fresh connection, answered within 10 s or status 0.
Reply Send(int port, http::verb verb, const std::string& target, const std::string& body = {},
           const std::map<std::string, std::string>& headers = {}) {
  return testing::HttpOnce(port, verb, target, body, headers);
}

// zlib's deflate: gzip framing (window_bits 31) or zlib framing (15).
std::string Compress(const std::string& text, int window_bits) {
  z_stream z{};
  deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, text.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

const std::vector<float> kX = {1, 2, 3};
const std::vector<float> kY = {0.5f, -1, 4};

// add2 (sum = x + 2 * y) over JSON, with extra top-level keys when given.
std::string Add2Body(json extra = json::object()) {
  json body = {{"inputs",
                {{{"name", "x"}, {"datatype", "FP32"}, {"shape", {1, 3}}, {"data", kX}},
                 {{"name", "y"}, {"datatype", "FP32"}, {"shape", {1, 3}}, {"data", kY}}}}};
  body.update(extra);
  return body.dump();
}

void ExpectAdd2Sum(const Reply& reply) {
  ASSERT_EQ(reply.status, 200) << reply.body.substr(0, 300);
  const std::vector<float> sum = reply.Json()["outputs"][0]["data"].get<std::vector<float>>();
  ASSERT_EQ(sum.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(sum[i], kX[i] + 2 * kY[i]);
}

class V2TritonClient : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    json add2 =
        ModelEntry("add2", "add2.pt", {-1, 3}, 1,
                   {{"max_batch_size", 4}, {"priority_levels", 2}, {"default_priority_level", 2}});
    add2["inputs"] = {{{"name", "x"}, {"dtype", "float32"}, {"shape", {-1, 3}}},
                      {{"name", "y"}, {"dtype", "float32"}, {"shape", {-1, 3}}}};
    add2["outputs"] = {{{"name", "sum"}, {"dtype", "float32"}, {"shape", {-1, 3}}}};
    farm_ = new Farm(
        json::array({add2}),
        {{"http_endpoint", "127.0.0.1:0"},
         {"grpc_endpoint", "127.0.0.1:0"},
         {"frontend", {{"max_body_bytes", 1 << 20}, {"max_inflight_body_bytes", 4 << 20}}}});
    ASSERT_TRUE(farm_->Start());
    ASSERT_TRUE(farm_->WaitReady());
    const json stats = farm_->Admin("stats");
    http_port_ = stats["frontend"]["http"]["port"].get<int>();
    grpc_port_ = stats["frontend"]["grpc"]["port"].get<int>();
  }
  static void TearDownTestSuite() {
    delete farm_;
    farm_ = nullptr;
  }
  Reply Infer(const std::string& body, const std::map<std::string, std::string>& headers = {}) {
    return Send(http_port_, http::verb::post, "/v2/models/add2/infer", body, headers);
  }
  std::unique_ptr<inference::GRPCInferenceService::Stub> Stub() {
    return inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(grpc_port_), grpc::InsecureChannelCredentials()));
  }

  static Farm* farm_;
  static int http_port_;
  static int grpc_port_;
};
Farm* V2TritonClient::farm_ = nullptr;
int V2TritonClient::http_port_ = 0;
int V2TritonClient::grpc_port_ = 0;

TEST_F(V2TritonClient, GzipAndDeflateBodiesAnswerLikeTheRawOne) {
  ExpectAdd2Sum(Infer(Compress(Add2Body(), 31), {{"Content-Encoding", "gzip"}}));
  ExpectAdd2Sum(Infer(Compress(Add2Body(), 15), {{"Content-Encoding", "deflate"}}));
  ExpectAdd2Sum(Infer(Add2Body(), {{"Content-Encoding", "identity"}}));
}

TEST_F(V2TritonClient, HostileCompressedBodiesAreRefusedAndTheNextRequestServed) {
  // 64 MiB of spaces in ~64 KiB: past max_body_bytes (1 MiB) once inflated.
  const Reply bomb =
      Infer(Compress(std::string(64 << 20, ' '), 31), {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(bomb.status, 413) << bomb.body;
  EXPECT_NE(bomb.body.find("inflates past frontend.max_body_bytes (1048576 bytes)"),
            std::string::npos)
      << bomb.body;
  ExpectAdd2Sum(Infer(Add2Body()));

  const std::string whole = Compress(Add2Body(), 31);
  const Reply truncated = Infer(whole.substr(0, whole.size() - 9), {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(truncated.status, 400) << truncated.body;
  std::string lying = whole;
  lying[lying.size() - 2] ^= 0x40;  // the trailer's length claim
  const Reply lied = Infer(lying, {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(lied.status, 400) << lied.body;
  EXPECT_NE(lied.body.find("incorrect length check"), std::string::npos) << lied.body;
  const Reply brotli = Infer(Add2Body(), {{"Content-Encoding", "br"}});
  EXPECT_EQ(brotli.status, 415) << brotli.body;
  EXPECT_NE(brotli.body.find("Content-Encoding 'br' is not supported"), std::string::npos);
  const Reply not_gzip = Infer(Add2Body(), {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(not_gzip.status, 400) << not_gzip.body;
  ExpectAdd2Sum(Infer(Compress(Add2Body(), 31), {{"Content-Encoding", "gzip"}}));
}

TEST_F(V2TritonClient, KServesBodyWithModelNameInfers) {
  ExpectAdd2Sum(Infer(Add2Body({{"model_name", "add2"}, {"model_version", ""}})));
  const Reply wrong = Infer(Add2Body({{"model_name", "add2"}, {"id", 7}}));
  EXPECT_EQ(wrong.status, 400);
  EXPECT_EQ(wrong.Json().value("error", ""), "id: expected a string, got number 7");
}

TEST_F(V2TritonClient, GrpcTakesTritonsUint64PriorityAndSaysUnknownModelsAreNotReady) {
  auto stub = Stub();
  inference::ModelInferRequest request;
  request.set_model_name("add2");
  for (const auto& [name, values] : {std::pair{"x", kX}, std::pair{"y", kY}}) {
    auto* input = request.add_inputs();
    input->set_name(name);
    input->set_datatype("FP32");
    input->add_shape(1);
    input->add_shape(3);
    request.add_raw_input_contents(reinterpret_cast<const char*>(values.data()), 12);
  }
  for (uint64_t priority : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{1} << 40}) {
    (*request.mutable_parameters())["priority"].set_uint64_param(priority);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    inference::ModelInferResponse response;
    const grpc::Status status = stub->ModelInfer(&context, request, &response);
    ASSERT_TRUE(status.ok()) << priority << ": " << status.error_message();
    ASSERT_EQ(response.raw_output_contents_size(), 1);
    std::vector<float> sum(3);
    std::memcpy(sum.data(), response.raw_output_contents(0).data(), 12);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(sum[i], kX[i] + 2 * kY[i]);
  }
  for (const auto& [name, ready] : {std::pair{"add2", true}, std::pair{"nope", false}}) {
    grpc::ClientContext context;
    inference::ModelReadyRequest ready_request;
    ready_request.set_name(name);
    inference::ModelReadyResponse response;
    ASSERT_TRUE(stub->ModelReady(&context, ready_request, &response).ok()) << name;
    EXPECT_EQ(response.ready(), ready) << name;
  }
}

TEST_F(V2TritonClient, ConfigAndStatisticsOverHttpAndGrpc) {
  ExpectAdd2Sum(Infer(Add2Body()));
  const Reply config = Send(http_port_, http::verb::get, "/v2/models/add2/config");
  ASSERT_EQ(config.status, 200) << config.body;
  const json c = config.Json();
  EXPECT_EQ(c["max_batch_size"], 4);
  EXPECT_EQ(c["input"][1]["name"], "y");
  EXPECT_EQ(c["input"][1]["dims"], json::array({3}));
  EXPECT_EQ(c["output"][0]["name"], "sum");
  EXPECT_EQ(c["dynamic_batching"]["priority_levels"], 2);
  EXPECT_EQ(c["dynamic_batching"]["default_priority_level"], 2);
  const Reply all = Send(http_port_, http::verb::get, "/v2/models/stats");
  ASSERT_EQ(all.status, 200) << all.body;
  const json entry = all.Json()["model_stats"][0];
  EXPECT_EQ(entry["name"], "add2");
  EXPECT_GE(entry["inference_stats"]["success"]["count"].get<uint64_t>(), 1u);
  EXPECT_EQ(Send(http_port_, http::verb::get, "/v2/models/nope/stats").status, 404);

  auto stub = Stub();
  grpc::ClientContext context;
  inference::ModelConfigRequest request;
  request.set_name("add2");
  inference::ModelConfigResponse response;
  ASSERT_TRUE(stub->ModelConfig(&context, request, &response).ok());
  EXPECT_EQ(response.config().dynamic_batching().priority_levels(), 2u);
  grpc::ClientContext stats_context;
  inference::ModelStatisticsRequest stats_request;
  stats_request.set_name("add2");
  inference::ModelStatisticsResponse stats;
  ASSERT_TRUE(stub->ModelStatistics(&stats_context, stats_request, &stats).ok());
  ASSERT_EQ(stats.model_stats_size(), 1);
  EXPECT_GE(stats.model_stats(0).inference_stats().success().count(), 1u);
}

// Triton's priorities on the v2 front ends (docs/kserve-v2.md, "Priority"): with
// default_priority_level 2 of 2, a request with priority 0 waits at the low level and a later one
// with priority 1 overtakes it while the one worker is busy.
TEST(V2TritonPriority, PriorityOneOvertakesTheDefaultLevel) {
  json slow = ModelEntry("slow", "slow.pt", {-1, 4}, 1,
                         {{"max_batch_size", 1},
                          {"max_inflight_per_worker", 1},
                          {"priority_levels", 2},
                          {"default_priority_level", 2}});
  Farm farm(json::array({slow}), {{"http_endpoint", "127.0.0.1:0"}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady());
  const int port = farm.Admin("stats")["frontend"]["http"]["port"].get<int>();
  auto body = [](float work, int priority) {
    return json{{"parameters", {{"priority", priority}}},
                {"inputs",
                 {{{"name", "INPUT__0"},
                   {"datatype", "FP32"},
                   {"shape", {1, 4}},
                   {"data", {work, 0, 0, 0}}}}}}
        .dump();
  };
  std::mutex mutex;
  std::vector<std::string> finished;
  auto run = [&](const std::string& name, const std::string& request) {
    const auto start = std::chrono::steady_clock::now();
    const Reply reply = Send(port, http::verb::post, "/v2/models/slow/infer", request);
    std::lock_guard<std::mutex> lock(mutex);
    std::fprintf(stderr, "%s: %lld ms\n", name.c_str(),
                 static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::steady_clock::now() - start)
                                            .count()));
    finished.push_back(name + (reply.status == 200 ? "" : " failed: " + reply.body));
  };
  std::thread blocker(run, "blocker", body(20000, 1));  // keeps the one worker busy (~1-3 s)
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  std::thread low(run, "default", body(3000, 0));  // work of its own: the order is clear
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Work of its own too: with none, its reply and the blocker's leave in the same turn and the
  // two client threads race to record them (seen on a fast machine: highest first).
  std::thread high(run, "highest", body(1000, 1));
  blocker.join();
  low.join();
  high.join();
  ASSERT_EQ(finished.size(), 3u);
  EXPECT_EQ(finished, (std::vector<std::string>{"blocker", "highest", "default"}))
      << "the blocker must outlast the 250 ms the others take to arrive";
}

}  // namespace
}  // namespace torchfarm
