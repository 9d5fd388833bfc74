// The Open Inference Protocol (KServe v2) over HTTP against a real farm (real supervisor, real
// workers, documented defaults): every endpoint, the JSON and binary paths bit for bit equal to
// the ZeroMQ path, each error class with its HTTP status, keep-alive, draining.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "tests/integration/farm_fixture.h"
#include "tests/integration/http_test_client.h"
#include "torchfarm/client.h"

namespace torchfarm {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using nlohmann::json;
using testing::Farm;
using testing::ModelEntry;

using testing::HttpReply;

// One keep-alive HTTP/1.1 connection to 127.0.0.1:port.
class HttpConnection {
 public:
  explicit HttpConnection(int port) : socket_(io_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  }
  HttpReply Send(http::verb verb, const std::string& target, const std::string& body = {},
                 const std::map<std::string, std::string>& headers = {}) {
    http::request<http::string_body> request{verb, target, 11};
    request.set(http::field::host, "127.0.0.1");
    for (const auto& [k, v] : headers) request.set(k, v);
    request.body() = body;
    request.keep_alive(true);
    if (verb == http::verb::post) request.prepare_payload();
    http::write(socket_, request);
    http::response<http::string_body> response;
    http::read(socket_, buffer_, response);
    HttpReply out;
    out.status = response.result_int();
    out.body = response.body();
    for (const auto& field : response) {
      out.headers[std::string(field.name_string())] = std::string(field.value());
    }
    return out;
  }
  HttpReply Get(const std::string& target) { return Send(http::verb::get, target); }
  HttpReply Post(const std::string& target, const std::string& body,
                 const std::map<std::string, std::string>& headers = {}) {
    return Send(http::verb::post, target, body, headers);
  }

 private:
  asio::io_context io_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

json FrontendEndpoints() {
  return {{"http_endpoint", "127.0.0.1:0"}};
}

int HttpPort(const Farm& farm) {
  const json stats = farm.Admin("stats");
  return stats.at("frontend").at("http").at("port").get<int>();
}

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The mlp's output over ZeroMQ, as the reference bytes.
std::string ZmqOutput(const Farm& farm, const std::vector<float>& input, int64_t rows) {
  Client client(farm.endpoint());
  InferResult result;
  TensorView view(TensorSpec{DType::kFloat32, {rows, 256}}, input.data(), input.size() * 4);
  Status s = client.Infer("mlp", {view}, &result);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return result.outputs.empty() ? std::string() : result.outputs[0].data;
}

class KserveV2Http : public ::testing::Test {
 protected:
  void SetUp() override {
    json models = json::array({ModelEntry("mlp", "mlp.pt", {-1, 256}, 1,
                                          {{"max_batch_size", 8}})});
    farm_ = std::make_unique<Farm>(models, FrontendEndpoints());
    ASSERT_TRUE(farm_->Start());
    ASSERT_TRUE(farm_->WaitReady());
    port_ = HttpPort(*farm_);
    ASSERT_GT(port_, 0);
  }
  std::unique_ptr<Farm> farm_;
  int port_ = 0;
};

TEST_F(KserveV2Http, HealthServerAndModelMetadata) {
  HttpConnection http(port_);
  EXPECT_EQ(http.Get("/v2/health/live").status, 200);
  EXPECT_EQ(http.Get("/v2/health/ready").status, 200);
  const json server = http.Get("/v2").Json();
  EXPECT_EQ(server.value("name", ""), "torchfarm");
  EXPECT_TRUE(server.contains("version"));
  EXPECT_TRUE(server.contains("extensions"));
  EXPECT_EQ(http.Get("/v2/models/mlp/ready").status, 200);
  EXPECT_EQ(http.Get("/v2/models/mlp/versions/1/ready").status, 200);
  HttpReply meta = http.Get("/v2/models/mlp");
  ASSERT_EQ(meta.status, 200) << meta.body;
  const json m = meta.Json();
  EXPECT_EQ(m["name"], "mlp");
  EXPECT_EQ(m["platform"], "pytorch_libtorch");
  EXPECT_EQ(m["versions"], json::array({"1"}));
  ASSERT_EQ(m["inputs"].size(), 1u);
  EXPECT_EQ(m["inputs"][0]["name"], "INPUT__0");
  EXPECT_EQ(m["inputs"][0]["datatype"], "FP32");
  EXPECT_EQ(m["inputs"][0]["shape"], json::array({-1, 256}));
  EXPECT_EQ(http.Get("/v2/models/mlp/versions/1").status, 200);
  HttpReply missing = http.Get("/v2/models/nope");
  EXPECT_EQ(missing.status, 404);
  EXPECT_TRUE(missing.Json().contains("error")) << missing.body;
  EXPECT_EQ(http.Get("/v2/models/mlp/versions/7").status, 404);
  EXPECT_EQ(http.Get("/v2/models/nope/ready").status, 404);
}

TEST_F(KserveV2Http, JsonAndBinaryOutputsEqualTheZeroMqPathBitForBit) {
  const std::vector<float> input = RandomFloats(3 * 256, 17);
  const std::string reference = ZmqOutput(*farm_, input, 3);
  ASSERT_EQ(reference.size(), 3u * 128 * 4);
  HttpConnection http(port_);

  // JSON in, JSON out.
  json request = {{"id", "req-1"},
                  {"inputs", {{{"name", "INPUT__0"}, {"datatype", "FP32"}, {"shape", {3, 256}},
                               {"data", input}}}}};
  HttpReply reply = http.Post("/v2/models/mlp/infer", request.dump(),
                              {{"Content-Type", "application/json"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json answer = reply.Json();
  EXPECT_EQ(answer["model_name"], "mlp");
  EXPECT_EQ(answer["id"], "req-1");
  ASSERT_EQ(answer["outputs"].size(), 1u);
  EXPECT_EQ(answer["outputs"][0]["datatype"], "FP32");
  EXPECT_EQ(answer["outputs"][0]["shape"], json::array({3, 128}));
  std::vector<float> from_json = answer["outputs"][0]["data"].get<std::vector<float>>();
  ASSERT_EQ(from_json.size() * 4, reference.size());
  EXPECT_EQ(std::memcmp(from_json.data(), reference.data(), reference.size()), 0);

  // Binary in, binary out (Triton's binary tensor extension).
  json header = {{"inputs", {{{"name", "INPUT__0"}, {"datatype", "FP32"}, {"shape", {3, 256}},
                              {"parameters", {{"binary_data_size", input.size() * 4}}}}}},
                 {"parameters", {{"binary_data_output", true}}}};
  std::string body = header.dump();
  const size_t json_size = body.size();
  body.append(reinterpret_cast<const char*>(input.data()), input.size() * 4);
  reply = http.Post("/v2/models/mlp/infer", body,
                    {{"Inference-Header-Content-Length", std::to_string(json_size)},
                     {"Content-Type", "application/octet-stream"}});
  ASSERT_EQ(reply.status, 200) << reply.body.substr(0, 300);
  ASSERT_TRUE(reply.headers.count("Inference-Header-Content-Length")) << reply.body.substr(0, 300);
  const size_t answer_json = std::stoul(reply.headers["Inference-Header-Content-Length"]);
  const json binary_answer = json::parse(reply.body.substr(0, answer_json));
  EXPECT_EQ(binary_answer["outputs"][0]["parameters"]["binary_data_size"], reference.size());
  EXPECT_EQ(reply.body.substr(answer_json), reference);
}

// JSON tensor data is read by a fast float path (stop 48): a hostile number fails its own request
// with 400, and the next good request on the same connection reads every number exactly (its
// JSON reply equals the ZeroMQ path's output bit for bit), as written by Python's json (%.17g).
TEST_F(KserveV2Http, HostileJsonNumbersFailTheirOwnRequestAndTheNextIsExact) {
  const std::vector<float> input = RandomFloats(256, 23);
  const std::string reference = ZmqOutput(*farm_, input, 1);
  auto body = [](const std::string& data) {
    return R"({"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 256], "data": [)" +
           data + "]}]}";
  };
  std::string rest;
  for (int i = 1; i < 256; ++i) rest += ", 0.5";
  HttpConnection http(port_);
  for (const std::string first :
       {"3.5e39", "0.12.3", "-", "01.5", "1e", "0.5e99999999", "\"0.5\"", "null", "0x10"}) {
    const HttpReply r = http.Post("/v2/models/mlp/infer", body(first + rest));
    EXPECT_EQ(r.status, 400) << first << ": " << r.body;
    EXPECT_TRUE(r.Json().contains("error")) << first << ": " << r.body;
  }
  std::string data;
  for (size_t i = 0; i < input.size(); ++i) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.17g", static_cast<double>(input[i]));
    data += (i ? ", " : "") + std::string(text);
  }
  const HttpReply good = http.Post("/v2/models/mlp/infer", body(data));
  ASSERT_EQ(good.status, 200) << good.body.substr(0, 300);
  std::vector<float> out = good.Json()["outputs"][0]["data"].get<std::vector<float>>();
  ASSERT_EQ(out.size() * 4, reference.size());
  EXPECT_EQ(std::memcmp(out.data(), reference.data(), reference.size()), 0);
}

TEST_F(KserveV2Http, ErrorsCarryTheStatusOfTheFarmCode) {
  HttpConnection http(port_);
  // Not JSON.
  HttpReply r = http.Post("/v2/models/mlp/infer", "{not json", {});
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(r.Json().contains("error")) << r.body;
  // Wrong shape: the farm's own message, naming expected and received.
  json wrong = {{"inputs", {{{"name", "INPUT__0"}, {"datatype", "FP32"}, {"shape", {1, 255}},
                             {"data", std::vector<float>(255, 1.0f)}}}}};
  r = http.Post("/v2/models/mlp/infer", wrong.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.Json().value("error", "").find("expected"), std::string::npos) << r.body;
  // Unknown model.
  json ok_input = {{"inputs", {{{"name", "INPUT__0"}, {"datatype", "FP32"}, {"shape", {1, 256}},
                                {"data", std::vector<float>(256, 1.0f)}}}}};
  r = http.Post("/v2/models/nope/infer", ok_input.dump());
  EXPECT_EQ(r.status, 404) << r.body;
  // Unknown path and wrong method.
  EXPECT_EQ(http.Get("/v3/anything").status, 404);
  EXPECT_EQ(http.Post("/v2/health/live", "").status, 405);
  // The connection survived every error.
  EXPECT_EQ(http.Get("/v2/health/live").status, 200);
}

TEST_F(KserveV2Http, KeepAliveServesManyRequestsOnOneConnection) {
  HttpConnection http(port_);
  const std::vector<float> input = RandomFloats(256, 3);
  const std::string reference = ZmqOutput(*farm_, input, 1);
  json request = {{"inputs", {{{"name", "INPUT__0"}, {"datatype", "FP32"}, {"shape", {1, 256}},
                               {"data", input}}}}};
  const std::string body = request.dump();
  for (int i = 0; i < 200; ++i) {
    HttpReply r = http.Post("/v2/models/mlp/infer", body);
    ASSERT_EQ(r.status, 200) << i << ": " << r.body;
    std::vector<float> out = r.Json()["outputs"][0]["data"].get<std::vector<float>>();
    ASSERT_EQ(std::memcmp(out.data(), reference.data(), reference.size()), 0) << i;
  }
  const json stats = farm_->Admin("stats");
  EXPECT_GE(stats["frontend"]["http"]["requests"].get<int>(), 200);
}

TEST_F(KserveV2Http, ADrainingFarmIsLiveButNotReadyAndRefusesWith503) {
  HttpConnection http(port_);
  ASSERT_EQ(http.Get("/v2/health/ready").status, 200);
  const json drained = farm_->Admin("drain");
  ASSERT_FALSE(drained.is_null());
  EXPECT_EQ(http.Get("/v2/health/live").status, 200);
  EXPECT_EQ(http.Get("/v2/health/ready").status, 503);
  json request = {{"inputs", {{{"name", "INPUT__0"}, {"datatype", "FP32"}, {"shape", {1, 256}},
                               {"data", std::vector<float>(256, 0.5f)}}}}};
  HttpReply r = http.Post("/v2/models/mlp/infer", request.dump());
  EXPECT_EQ(r.status, 503) << r.body;
}

// A thousand idle keep-alive clients (under the default max_connections) cost the supervisor
// little memory and starve nobody: a new client is served, the job socket too, and the metrics
// count each protocol apart.
TEST(KserveV2HttpConnections, AThousandIdleConnectionsLeaveTheFarmServingWithBoundedMemory) {
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_max < 1200) GTEST_SKIP() << "descriptor hard limit " << files.rlim_max << " < 1200";
  files.rlim_cur = files.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
  const int metrics_port = testing::FreePort();
  json extra = FrontendEndpoints();
  extra["metrics_endpoint"] = "127.0.0.1:" + std::to_string(metrics_port);
  json models = json::array({ModelEntry("mlp", "mlp.pt", {-1, 256}, 1)});
  Farm farm(models, extra);
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady());
  const int port = HttpPort(farm);
  const int64_t rss_before = farm.Admin("stats")["supervisor"]["rss_anon_bytes"].get<int64_t>();
  std::vector<std::unique_ptr<HttpConnection>> idle;
  for (int i = 0; i < 1000; ++i) idle.push_back(std::make_unique<HttpConnection>(port));
  // One request on some of them so they are real keep-alive connections, not just accepted ones.
  for (int i = 0; i < 1000; i += 100) ASSERT_EQ(idle[i]->Get("/v2/health/live").status, 200);
  HttpConnection fresh(port);
  json request = {{"inputs", {{{"name", "INPUT__0"}, {"datatype", "FP32"}, {"shape", {1, 256}},
                               {"data", std::vector<float>(256, 0.25f)}}}}};
  HttpReply r = fresh.Post("/v2/models/mlp/infer", request.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const std::vector<float> input(256, 0.25f);
  EXPECT_EQ(ZmqOutput(farm, input, 1).size(), 128u * 4);
  const json stats = farm.Admin("stats");
  ASSERT_FALSE(stats.is_null());
  const int64_t rss_after = stats["supervisor"]["rss_anon_bytes"].get<int64_t>();
  std::printf("supervisor private memory: %lld -> %lld bytes with 1000 idle connections\n",
              static_cast<long long>(rss_before), static_cast<long long>(rss_after));
  // Beast keeps a small buffer per idle connection: well under 64 KiB each.
  EXPECT_LT(rss_after - rss_before, int64_t{64} << 20) << rss_before << " -> " << rss_after;
  const std::string metrics = HttpConnection(metrics_port).Get("/metrics").body;
  EXPECT_NE(
      metrics.find(
          R"(torchfarm_requests_total{model="mlp",protocol="http",status="OK",version="1"} 1)"),
      std::string::npos);
  EXPECT_NE(
      metrics.find(
          R"(torchfarm_requests_total{model="mlp",protocol="zmq",status="OK",version="1"} 1)"),
      std::string::npos);
  idle.clear();
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(KserveV2HttpDeadline, AQueuedRequestPastItsTimeoutGets504) {
  // One slow worker busy with a long request; the next one waits in the queue past its timeout.
  json models = json::array({ModelEntry("slow", "slow.pt", {-1, -1}, 1)});
  Farm farm(models, FrontendEndpoints());
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady());
  const int port = HttpPort(farm);
  // 4,000 work units of 0.04-0.1 ms each: 160-400 ms of compute per request, sent over ZeroMQ
  // first. The worker runs one and takes another into its ring (max_inflight_per_worker 2): the
  // third stays queued, and so does the HTTP request behind it.
  std::vector<float> long_input(4, 0.0f);
  long_input[0] = 4000.0f;
  Client client(farm.endpoint());
  // One short call first: the client's connection exists before the long ones are sent, so they
  // reach the loop before the HTTP request does.
  std::vector<float> short_input = {1.0f, 0.0f, 0.0f, 0.0f};
  InferResult warm;
  ASSERT_TRUE(client.Infer("slow", {TensorView(TensorSpec{DType::kFloat32, {1, 4}},
                                               short_input.data(), 16)}, &warm).ok());
  TensorView view(TensorSpec{DType::kFloat32, {1, 4}}, long_input.data(), 16);
  for (int i = 0; i < 3; ++i) {
    uint64_t id = 0;
    ASSERT_TRUE(client.Send("slow", {view}, {}, &id).ok());
  }
  // Let the loop take them in (the worker starts the first; the third waits in the queue).
  ::usleep(50'000);
  HttpConnection http(port);
  json request = {{"inputs", {{{"name", "INPUT__0"}, {"datatype", "FP32"}, {"shape", {1, 4}},
                               {"data", {1.0, 0.0, 0.0, 0.0}}}}},
                  {"parameters", {{"timeout", 20000}}}};  // µs, as Triton: 20 ms
  HttpReply r = http.Post("/v2/models/slow/infer", request.dump());
  EXPECT_EQ(r.status, 504) << r.body;
  for (int i = 0; i < 3; ++i) {
    InferResult result;
    uint64_t got = 0;
    EXPECT_TRUE(client.Receive(&result, &got, 10'000).ok());
  }
}

// One request over ZeroMQ with `version` in its header ("" leaves it out): the reply's header and
// its output frames.
std::pair<json, std::vector<std::string>> ZmqInferVersion(const Farm& farm,
                                                          const std::string& version,
                                                          const std::vector<float>& input) {
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, 10'000);
  socket.connect(farm.endpoint());
  json header = {{"v", 1},
                 {"id", 1},
                 {"model", "v"},
                 {"inputs", {{{"dtype", "float32"}, {"shape", {1, 256}}}}}};
  if (!version.empty()) header["version"] = version;
  socket.send(zmq::buffer(header.dump()), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(input.data(), input.size() * 4), zmq::send_flags::none);
  std::vector<zmq::message_t> parts;
  (void)zmq::recv_multipart(socket, std::back_inserter(parts));
  if (parts.empty()) return {json(), {}};
  std::vector<std::string> frames;
  for (size_t i = 1; i < parts.size(); ++i) frames.push_back(parts[i].to_string());
  return {json::parse(parts[0].to_string(), nullptr, false), frames};
}

// Two versions of one model loaded at once, identity as "1" and the mlp as "2": a request naming a
// version runs on it (told apart by the output: 256 floats equal to the input, or 128), over
// ZeroMQ ("version") and HTTP (/versions/{v}/infer); one naming none runs on the latest; an
// unknown version is NOT_FOUND naming the versions; metadata lists both; metrics carry them.
TEST(KserveV2Versions, PinnedRequestsRunOnTheirVersionUnpinnedOnTheLatest) {
  const int metrics_port = testing::FreePort();
  json extra = FrontendEndpoints();
  extra["metrics_endpoint"] = "127.0.0.1:" + std::to_string(metrics_port);
  json entry = ModelEntry("v", "identity.pt", {-1, 256}, 1);
  entry.erase("path");
  entry["versions"] = {{{"version", "1"}, {"path", testing::ModelDir() + "/identity.pt"}},
                       {{"version", "2"}, {"path", testing::ModelDir() + "/mlp.pt"}}};
  entry["version_policy"] = "all";
  Farm farm(json::array({entry}), extra);
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady());
  const std::vector<float> input = RandomFloats(256, 18);
  const std::string input_bytes(reinterpret_cast<const char*>(input.data()), input.size() * 4);

  auto [one, one_frames] = ZmqInferVersion(farm, "1", input);
  ASSERT_EQ(one.value("status", ""), "ok") << one.dump();
  ASSERT_EQ(one_frames.size(), 1u);
  EXPECT_EQ(one_frames[0], input_bytes) << "version 1 is the identity";
  auto [two, two_frames] = ZmqInferVersion(farm, "2", input);
  ASSERT_EQ(two.value("status", ""), "ok") << two.dump();
  ASSERT_EQ(two_frames.size(), 1u);
  EXPECT_EQ(two_frames[0].size(), 128u * 4) << "version 2 is the mlp";
  auto [latest, latest_frames] = ZmqInferVersion(farm, "", input);
  ASSERT_EQ(latest.value("status", ""), "ok") << latest.dump();
  ASSERT_EQ(latest_frames.size(), 1u);
  EXPECT_EQ(latest_frames[0], two_frames[0]) << "no version: the latest, 2";
  auto [missing, missing_frames] = ZmqInferVersion(farm, "3", input);
  EXPECT_EQ(missing.value("code", ""), "NOT_FOUND") << missing.dump();
  EXPECT_NE(missing.value("message", "").find("no version '3' (loaded versions: 1, 2)"),
            std::string::npos)
      << missing.dump();

  HttpConnection http(HttpPort(farm));
  const json request = {
      {"inputs",
       {{{"name", "INPUT__0"}, {"datatype", "FP32"}, {"shape", {1, 256}}, {"data", input}}}}};
  auto output_size = [&](const std::string& target) {
    HttpReply r = http.Post(target, request.dump());
    EXPECT_EQ(r.status, 200) << target << ": " << r.body;
    const json j = r.Json();
    return j.is_object() ? j["outputs"][0]["data"].size() : size_t{0};
  };
  EXPECT_EQ(output_size("/v2/models/v/versions/1/infer"), 256u);
  EXPECT_EQ(output_size("/v2/models/v/versions/2/infer"), 128u);
  EXPECT_EQ(output_size("/v2/models/v/infer"), 128u);
  HttpReply unknown = http.Post("/v2/models/v/versions/3/infer", request.dump());
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  const json meta = http.Get("/v2/models/v").Json();
  EXPECT_EQ(meta["versions"], json::array({"1", "2"})) << meta.dump();
  EXPECT_EQ(http.Get("/v2/models/v/versions/1/ready").status, 200);
  EXPECT_EQ(http.Get("/v2/models/v/versions/3/ready").status, 404);

  const std::string metrics = HttpConnection(metrics_port).Get("/metrics").body;
  for (const char* series :
       {R"(torchfarm_requests_total{model="v",protocol="zmq",status="OK",version="1"} 1)",
        R"(torchfarm_requests_total{model="v",protocol="zmq",status="OK",version="2"} 2)",
        R"(torchfarm_requests_total{model="v",protocol="http",status="OK",version="2"} 2)"}) {
    EXPECT_NE(metrics.find(series), std::string::npos) << series;
  }
  const json stats = farm.Admin("stats");
  ASSERT_EQ(stats["models"].size(), 2u);
  EXPECT_EQ(stats["models"][0]["version"], "1");
  EXPECT_EQ(stats["models"][1]["version"], "2");
  EXPECT_EQ(farm.Stop(), 0);
}

// A reload that swaps version 1 (identity) for version 2 (the mlp): a client sending unpinned
// requests throughout gets no error; it is answered by version 1 until version 2 is ready and by
// version 2 from its first answer on; version 1 is removed only then.
TEST(ModelVersionsReload, ANewVersionServesBeforeTheOldOneGoes) {
  auto entry = [](json versions) {
    json e = ModelEntry("v", "identity.pt", {-1, 256}, 1);
    e.erase("path");
    e["versions"] = std::move(versions);
    return json::array({e});
  };
  const json one = {{"version", "1"}, {"path", testing::ModelDir() + "/identity.pt"}};
  const json two = {{"version", "2"}, {"path", testing::ModelDir() + "/mlp.pt"}};
  Farm farm(entry({one}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady());
  const std::vector<float> input = RandomFloats(256, 7);
  const std::string input_bytes(reinterpret_cast<const char*>(input.data()), input.size() * 4);
  std::atomic<bool> stop{false};
  std::atomic<int> identity{0}, mlp{0}, errors{0}, identity_after_mlp{0};
  std::string first_error;
  std::thread client([&] {
    while (!stop) {
      auto [header, frames] = ZmqInferVersion(farm, "", input);
      if (header.value("status", "") != "ok" || frames.size() != 1) {
        if (errors++ == 0) first_error = header.dump();
      } else if (frames[0] == input_bytes) {
        ++identity;
        if (mlp > 0) ++identity_after_mlp;
      } else if (frames[0].size() == 128 * 4) {
        ++mlp;
      }
    }
  });
  while (identity < 5) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  farm.RewriteConfig(entry({one, two}));  // version_policy latest 1: 2 only
  const json reloaded = farm.Admin("reload");
  EXPECT_TRUE(reloaded.value("ok", false)) << reloaded.dump();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (mlp < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  client.join();
  EXPECT_EQ(errors, 0) << first_error;
  EXPECT_GE(mlp, 5);
  EXPECT_EQ(identity_after_mlp, 0) << "once version 2 answered, it is the default";
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = ZmqInferVersion(farm, "1", input).first.value("code", "") == "NOT_FOUND";
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(gone) << "version 1 is removed once version 2 is ready";
  EXPECT_EQ(farm.Stop(), 0);
}

}  // namespace
}  // namespace torchfarm
