// HttpServer over real TCP against a fake job loop (fake_farm_loop.h): routes, keep-alive, the
// farm's error codes as HTTP statuses, and malformed or hostile HTTP (bad JSON, wrong
// Content-Length, a header too large, a body too large, a slow-loris client, idle keep-alive
// connections, more connections than max_connections).
#include "supervisor/frontend/http_server.h"

#include <poll.h>
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstring>
#include <thread>

#include "fake_farm_loop.h"
#include "supervisor/frontend/v2_http_codec.h"

namespace torchfarm {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;
using Response = http::response<http::string_body>;

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(FrontendConfig config = {}) {
    loop_ = std::make_unique<testing::FakeFarmLoop>();
    channel_ = std::make_unique<FarmChannel>(loop_->hub());
    ASSERT_TRUE(channel_->Start().ok());
    second_channel_ = std::make_unique<FarmChannel>(loop_->hub());
    ASSERT_TRUE(second_channel_->Start().ok());
    config.http_endpoint = "127.0.0.1:0";
    Status s = HttpServer::Start(config, {channel_.get(), second_channel_.get()}, &stats_,
                                 &server_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  void TearDown() override {
    if (server_) server_->Stop();
    server_.reset();
    if (channel_) channel_->Stop();
    if (second_channel_) second_channel_->Stop();
  }

  tcp::socket Connect() {
    tcp::socket socket(io_);
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
    return socket;
  }

  static Response Send(tcp::socket& socket, http::verb method, const std::string& target,
                       const std::string& body = {},
                       std::vector<std::pair<std::string, std::string>> headers = {}) {
    http::request<http::string_body> request(method, target, 11);
    request.set(http::field::host, "localhost");
    for (const auto& [name, value] : headers) request.set(name, value);
    request.body() = body;
    request.prepare_payload();
    http::write(socket, request);
    return Read(socket);
  }

  static Response Read(tcp::socket& socket) {
    boost::beast::flat_buffer buffer;
    Response response;
    http::read(socket, buffer, response);
    return response;
  }

  Response Get(const std::string& target) {
    tcp::socket socket = Connect();
    return Send(socket, http::verb::get, target);
  }

  Response Post(const std::string& target, const std::string& body,
                std::vector<std::pair<std::string, std::string>> headers = {}) {
    tcp::socket socket = Connect();
    return Send(socket, http::verb::post, target, body, std::move(headers));
  }

  // True when the server closes `socket` within `timeout` (reads to EOF, discarding data).
  static bool ClosedWithin(tcp::socket& socket, std::chrono::milliseconds timeout,
                           std::string* received = nullptr) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buffer[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd fd{socket.native_handle(), POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (::poll(&fd, 1, static_cast<int>(std::max<int64_t>(left.count(), 1))) <= 0) continue;
      const ssize_t n = ::recv(socket.native_handle(), buffer, sizeof(buffer), 0);
      if (n <= 0) return true;
      if (received) received->append(buffer, static_cast<size_t>(n));
    }
    return false;
  }

  static std::string Error(const Response& response) {
    return json::parse(response.body()).value("error", "");
  }

  asio::io_context io_;
  std::unique_ptr<testing::FakeFarmLoop> loop_;
  std::unique_ptr<FarmChannel> channel_;
  std::unique_ptr<FarmChannel> second_channel_;
  FrontendStats stats_;
  std::unique_ptr<HttpServer> server_;
};

const std::string kInferJson = R"({"id": "abc", "inputs": [
    {"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [[1.5, 2], [3, -4.25]]},
    {"name": "m", "datatype": "INT8", "shape": [3], "data": [-1, 0, 127]}]})";

TEST_F(HttpServerTest, HealthAndMetadataRoutes) {
  StartServer();
  EXPECT_EQ(Get("/v2/health/live").result_int(), 200);
  EXPECT_EQ(Get("/v2/health/ready").result_int(), 200);
  Response server = Get("/v2");
  ASSERT_EQ(server.result_int(), 200);
  EXPECT_EQ(json::parse(server.body())["name"], "torchfarm");
  for (const std::string target : {"/v2/models/echo", "/v2/models/echo/versions/1"}) {
    Response meta = Get(target);
    ASSERT_EQ(meta.result_int(), 200) << target;
    json j = json::parse(meta.body());
    EXPECT_EQ(j["name"], "echo");
    EXPECT_EQ(j["inputs"][0]["shape"], json::array({-1, 4}));
    EXPECT_FALSE(j.contains("ready"));
  }
  EXPECT_EQ(Get("/v2/models/echo/ready").result_int(), 200);
  EXPECT_EQ(Get("/v2/models/echo/versions/1/ready").result_int(), 200);
  Response version = Get("/v2/models/echo/versions/2");
  EXPECT_EQ(version.result_int(), 404);
  EXPECT_EQ(Error(version), "model 'echo' has no version '2' (loaded versions: 1)");
  Response missing = Get("/v2/models/nope");
  EXPECT_EQ(missing.result_int(), 404);
  EXPECT_NE(Error(missing).find("model 'nope' is not served"), std::string::npos);
  EXPECT_EQ(Get("/v2/models/nope/ready").result_int(), 404);
  EXPECT_EQ(loop_->last_header()["tag"], "meta");

  loop_->set_ready(false);
  Response not_ready = Get("/v2/health/ready");
  EXPECT_EQ(not_ready.result_int(), 503);
  EXPECT_EQ(json::parse(not_ready.body())["ready"], false);
  EXPECT_EQ(Get("/v2/health/live").result_int(), 200);
}

TEST_F(HttpServerTest, UnknownPathsAndWrongMethods) {
  StartServer();
  for (const std::string target : {"/", "/v1/models/echo", "/v2/models", "/v2/models/echo/x",
                                   "/v2/health", "/v2/models/echo/versions/1/infer/x"}) {
    Response r = Get(target);
    EXPECT_EQ(r.result_int(), 404) << target;
    EXPECT_NE(Error(r).find("no such path"), std::string::npos) << target;
  }
  Response post_live = Post("/v2/health/live", "");
  EXPECT_EQ(post_live.result_int(), 405);
  EXPECT_EQ(post_live[http::field::allow], "GET");
  EXPECT_EQ(Error(post_live), "this path takes GET, got POST");
  Response get_infer = Get("/v2/models/echo/infer");
  EXPECT_EQ(get_infer.result_int(), 405);
  EXPECT_EQ(get_infer[http::field::allow], "POST");
}

// Issue 33: the dashboard's page, its assets and its status JSON.
TEST_F(HttpServerTest, TheDashboardServesItsPageAssetsAndStatusFromItsOwnOrigin) {
  StartServer();
  Response page = Get("/dashboard");
  ASSERT_EQ(page.result_int(), 200) << page.body();
  EXPECT_EQ(page[http::field::content_type], "text/html; charset=utf-8");
  EXPECT_NE(page["Content-Security-Policy"].find("default-src 'none'"), std::string::npos);
  EXPECT_NE(page["Content-Security-Policy"].find("connect-src 'self'"), std::string::npos);
  EXPECT_EQ(page[http::field::cache_control], "no-store");
  EXPECT_EQ(loop_->last_header()["tag"], "meta");
  EXPECT_EQ(loop_->last_header()["dashboard"], true);
  const std::string& html = page.body();
  // Server-rendered: what curl (or a browser without JavaScript) shows.
  EXPECT_NE(html.find("<tr data-model=\"echo\""), std::string::npos) << html;
  EXPECT_NE(html.find("<td data-k=\"workers\">1/2</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<td data-k=\"requests\">24691</td>"), std::string::npos) << html;
  EXPECT_NE(html.find(">3 (RESOURCE_EXHAUSTED 1, UNAVAILABLE 2)</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("worker hung: &lt;b&gt;no heartbeat&lt;/b&gt; (killed by SIGKILL)"),
            std::string::npos)
      << "an exit cause is text, never markup";
  EXPECT_NE(html.find("rolling 1/2"), std::string::npos);
  EXPECT_NE(html.find("worker 1 pid 4002 exited: killed by SIGKILL"), std::string::npos);
  EXPECT_LT(html.find("data-seq=\"2\""), html.find("data-seq=\"1\"")) << "newest first";
  EXPECT_NE(html.find("<script src=\"/dashboard/dashboard.js\"></script>"), std::string::npos);
  for (const std::string& body :
       {html, Get("/dashboard/dashboard.js").body(), Get("/dashboard/dashboard.css").body()}) {
    EXPECT_EQ(body.find("http://"), std::string::npos) << "nothing from another origin";
    EXPECT_EQ(body.find("https://"), std::string::npos) << "nothing from another origin";
  }

  Response script = Get("/dashboard/dashboard.js");
  ASSERT_EQ(script.result_int(), 200);
  EXPECT_EQ(script[http::field::content_type], "text/javascript; charset=utf-8");
  EXPECT_NE(script.body().find("/v2/torchfarm/stats"), std::string::npos);
  Response style = Get("/dashboard/dashboard.css");
  ASSERT_EQ(style.result_int(), 200);
  EXPECT_EQ(style[http::field::content_type], "text/css; charset=utf-8");

  Response status = Get("/v2/torchfarm/stats?events_after=1");
  ASSERT_EQ(status.result_int(), 200);
  EXPECT_EQ(status[http::field::content_type], "application/json");
  EXPECT_EQ(loop_->last_header()["events_after"], 1);
  const json j = json::parse(status.body());
  EXPECT_EQ(j["models"][0]["name"], "echo");
  for (const char* key : {"id", "status", "v"}) EXPECT_FALSE(j.contains(key)) << key;

  EXPECT_EQ(Get("/dashboard/").result_int(), 200);
  Response missing = Get("/dashboard/nope.js");
  EXPECT_EQ(missing.result_int(), 404);
  EXPECT_NE(Error(missing).find("no such path"), std::string::npos);
  Response post = Post("/dashboard", "");
  EXPECT_EQ(post.result_int(), 405);
  EXPECT_EQ(post[http::field::allow], "GET");
}

TEST_F(HttpServerTest, DashboardFalseTurnsThePageAndItsStatusOff) {
  FrontendConfig config;
  config.dashboard = false;
  StartServer(config);
  for (const std::string target :
       {"/dashboard", "/dashboard/dashboard.js", "/v2/torchfarm/stats"}) {
    Response r = Get(target);
    EXPECT_EQ(r.result_int(), 404) << target;
    EXPECT_NE(Error(r).find("frontend.dashboard is false"), std::string::npos) << target;
  }
  EXPECT_EQ(loop_->requests(), 0) << "the farm was never asked";
  EXPECT_EQ(Get("/v2/health/live").result_int(), 200);
}

TEST_F(HttpServerTest, JsonInferenceOverKeepAlive) {
  StartServer();
  tcp::socket socket = Connect();
  for (int i = 0; i < 5; ++i) {
    const std::string target =
        i % 2 ? "/v2/models/echo/versions/1/infer" : "/v2/models/echo/infer";
    Response r = Send(socket, http::verb::post, target, kInferJson);
    ASSERT_EQ(r.result_int(), 200) << r.body();
    EXPECT_TRUE(r.keep_alive());
    json j = json::parse(r.body());
    EXPECT_EQ(j["model_name"], "echo");
    if (i % 2) {
      EXPECT_EQ(j["model_version"], "1");
    } else {
      EXPECT_FALSE(j.contains("model_version")) << "unpinned: the farm chose the version";
    }
    EXPECT_EQ(j["id"], "abc");
    EXPECT_EQ(j["outputs"][0]["name"], "OUTPUT__0");
    EXPECT_EQ(j["outputs"][0]["datatype"], "FP32");
    EXPECT_EQ(j["outputs"][0]["shape"], json::array({2, 2}));
    EXPECT_EQ(j["outputs"][0]["data"], json::array({1.5, 2, 3, -4.25}));
    EXPECT_EQ(j["outputs"][1]["data"], json::array({-1, 0, 127}));
  }
  EXPECT_EQ(Send(socket, http::verb::get, "/v2/health/live").result_int(), 200);
  json header = loop_->last_header();
  EXPECT_EQ(loop_->requests(), 6);
  // The server records a request once its response is written, maybe after the client read it.
  json stats = stats_.ToJson();
  for (int i = 0; i < 100 && stats["http"]["requests"] != 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stats = stats_.ToJson();
  }
  EXPECT_EQ(stats["http"]["requests"], 6) << stats.dump();
}

TEST_F(HttpServerTest, InferTagsTheRequestWithThePeerAndSendsNamedInputs) {
  StartServer();
  tcp::socket socket = Connect();
  ASSERT_EQ(Send(socket, http::verb::post, "/v2/models/echo/infer", kInferJson).result_int(), 200);
  json header = loop_->last_header();
  const auto local = socket.local_endpoint();
  EXPECT_EQ(header["tag"], "http 127.0.0.1:" + std::to_string(local.port()));
  EXPECT_EQ(header["model"], "echo");
  EXPECT_EQ(header["inputs"][0],
            json::parse(R"({"name": "x", "dtype": "float32", "shape": [2, 2]})"));
}

// frontend.client_id_header: the header (any case) names the client in the tag; a hostile value,
// an empty one or two of them get 400 naming the header and never reach the farm, and the next
// request on the same connection is served. Without the header: the peer, as with the key off.
TEST_F(HttpServerTest, ClientIdHeaderNamesTheClientAndHostileValuesAre400) {
  FrontendConfig config;
  config.client_id_header = "x-tenant";
  StartServer(config);
  tcp::socket socket = Connect();
  auto infer = [&](const std::string& header_lines) {
    const std::string request =
        "POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\n" + header_lines +
        "Content-Length: " + std::to_string(kInferJson.size()) + "\r\n\r\n" + kInferJson;
    asio::write(socket, asio::buffer(request));
    return Read(socket);
  };
  Response named = infer("X-Tenant: tenant-gold\r\n");
  ASSERT_EQ(named.result_int(), 200) << named.body();
  EXPECT_EQ(loop_->last_header()["tag"], "http=tenant-gold");
  EXPECT_EQ(json::parse(named.body())["outputs"][0]["data"], json::parse("[1.5, 2, 3, -4.25]"));
  const int reached = loop_->requests();
  const std::string expected =
      "x-tenant: expected 1..255 visible ASCII characters naming the client "
      "(frontend.client_id_header), got ";
  const struct {
    std::string lines;
    std::string error;
  } hostile[] = {
      {"x-tenant: " + std::string(300, 'g') + "\r\n", expected + "300 bytes"},
      {"x-tenant: " + std::string(256, 'g') + "\r\n", expected + "256 bytes"},
      {"x-tenant:\r\n", expected + "an empty value"},
      {"x-tenant: t\xc3\xa9nant\r\n", expected + "7 bytes with byte 0xc3 at offset 1"},
      {"x-tenant: gold\r\nX-TENANT: gold\r\n",
       "x-tenant: expected one value naming the client (frontend.client_id_header), got 2 values"},
  };
  for (const auto& bad : hostile) {
    Response refused = infer(bad.lines);
    EXPECT_EQ(refused.result_int(), 400) << bad.lines;
    EXPECT_EQ(Error(refused), bad.error);
    EXPECT_TRUE(refused.keep_alive()) << "a bad header value is its request's problem only";
    // The next request on the same connection is served, named by its good value.
    Response good = infer("x-tenant: tenant-silver\r\n");
    ASSERT_EQ(good.result_int(), 200) << good.body();
    EXPECT_EQ(loop_->last_header()["tag"], "http=tenant-silver");
  }
  EXPECT_EQ(loop_->requests(), reached + 5) << "no refused request reached the farm";
  // 255 bytes is the largest id.
  ASSERT_EQ(infer("x-tenant: " + std::string(255, 'g') + "\r\n").result_int(), 200);
  EXPECT_EQ(loop_->last_header()["tag"], "http=" + std::string(255, 'g'));
  // Without the header: the connection's key.
  ASSERT_EQ(infer("").result_int(), 200);
  EXPECT_EQ(loop_->last_header()["tag"],
            "http 127.0.0.1:" + std::to_string(socket.local_endpoint().port()));
  // Health and metadata requests ignore it.
  EXPECT_EQ(Send(socket, http::verb::get, "/v2/health/ready", {}, {{"x-tenant", ""}}).result_int(),
            200);
  EXPECT_EQ(
      Send(socket, http::verb::get, "/v2/models/echo", {}, {{"x-tenant", "a b"}}).result_int(),
      200);
}

// With the key off (the default), a client's header of any name changes nothing.
TEST_F(HttpServerTest, WithoutClientIdHeaderAHeaderNamesNoClient) {
  StartServer();
  tcp::socket socket = Connect();
  Response r = Send(socket, http::verb::post, "/v2/models/echo/infer", kInferJson,
                    {{"x-tenant", "tenant-gold"}, {"x-client-id", ""}});
  ASSERT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(loop_->last_header()["tag"],
            "http 127.0.0.1:" + std::to_string(socket.local_endpoint().port()));
}

TEST_F(HttpServerTest, BinaryInferenceAndOutputSelection) {
  StartServer();
  json header = json::parse(R"({"inputs": [
      {"name": "a", "datatype": "FP32", "shape": [3], "parameters": {"binary_data_size": 12}},
      {"name": "b", "datatype": "UINT8", "shape": [2], "data": [7, 9]}],
      "outputs": [{"name": "out_a", "parameters": {"binary_data": true}}, {"name": "out_b"}]})");
  const float a[3] = {0.1f, -2.5f, 3e38f};
  const std::string json_text = header.dump();
  std::string body = json_text + std::string(reinterpret_cast<const char*>(a), sizeof(a));
  Response r = Post("/v2/models/named/infer", body,
                    {{kInferenceHeaderContentLength, std::to_string(json_text.size())}});
  ASSERT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(r[http::field::content_type], "application/octet-stream");
  const size_t json_bytes = std::stoul(std::string(r[kInferenceHeaderContentLength]));
  json j = json::parse(r.body().substr(0, json_bytes));
  ASSERT_EQ(j["outputs"].size(), 2u);
  EXPECT_EQ(j["outputs"][0]["name"], "out_a");
  EXPECT_EQ(j["outputs"][0]["parameters"]["binary_data_size"], 12);
  EXPECT_EQ(j["outputs"][1]["name"], "out_b");
  EXPECT_EQ(j["outputs"][1]["data"], json::array({7, 9}));
  EXPECT_EQ(std::memcmp(r.body().data() + json_bytes, a, sizeof(a)), 0);

  // binary_data_output for everything; and an unknown output name.
  header.erase("outputs");
  header["parameters"] = {{"binary_data_output", true}};
  const std::string all_text = header.dump();
  r = Post("/v2/models/echo/infer", all_text + std::string(reinterpret_cast<const char*>(a), 12),
           {{kInferenceHeaderContentLength, std::to_string(all_text.size())}});
  ASSERT_EQ(r.result_int(), 200) << r.body();
  const size_t all_json = std::stoul(std::string(r[kInferenceHeaderContentLength]));
  EXPECT_EQ(r.body().size(), all_json + 12 + 2);
  header.erase("parameters");
  header["outputs"] = {{{"name", "nope"}}};
  const std::string bad_text = header.dump();
  r = Post("/v2/models/named/infer", bad_text + std::string(reinterpret_cast<const char*>(a), 12),
           {{kInferenceHeaderContentLength, std::to_string(bad_text.size())}});
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_EQ(Error(r), "outputs[0]: model 'named' has no output 'nope'; it returns out_b, out_a");
}

// A model name is percent-decoded from the path, so it may be any bytes: one that is not UTF-8
// must get an answer (404), not an exception on the channel's thread (which ended the process).
TEST_F(HttpServerTest, AModelNameThatIsNotUtf8Gets404) {
  StartServer();
  tcp::socket socket = Connect();
  Response meta = Send(socket, http::verb::get, "/v2/models/%FF%FE");
  EXPECT_EQ(meta.result_int(), 404);
  Response ready = Send(socket, http::verb::get, "/v2/models/%C3/ready");
  EXPECT_EQ(ready.result_int(), 404);
  Response infer = Send(socket, http::verb::post, "/v2/models/%FF/infer", kInferJson);
  EXPECT_EQ(infer.result_int(), 404);
  EXPECT_EQ(Send(socket, http::verb::get, "/v2/health/live").result_int(), 200);
}

TEST_F(HttpServerTest, FarmCodesBecomeHttpStatuses) {
  StartServer();
  const std::pair<const char*, int> cases[] = {
      {"INVALID_ARGUMENT", 400}, {"NOT_FOUND", 404},   {"RESOURCE_EXHAUSTED", 429},
      {"DEADLINE_EXCEEDED", 504}, {"UNAVAILABLE", 503}, {"INTERNAL", 500}};
  tcp::socket socket = Connect();
  for (const auto& [code, status] : cases) {
    Response r = Send(socket, http::verb::post, std::string("/v2/models/code-") + code + "/infer",
                      kInferJson);
    EXPECT_EQ(r.result_int(), status) << code;
    EXPECT_EQ(Error(r), std::string("fake code-") + code);
    EXPECT_TRUE(r.keep_alive());
  }
  Response missing = Send(socket, http::verb::post, "/v2/models/nope/infer", kInferJson);
  EXPECT_EQ(missing.result_int(), 404);
  Response version = Send(socket, http::verb::post, "/v2/models/echo/versions/3/infer", kInferJson);
  EXPECT_EQ(version.result_int(), 404);
  EXPECT_EQ(Error(version), "model 'echo' has no version '3' (loaded versions: 1)");
  json stats = stats_.ToJson();
  for (int i = 0; i < 100 && stats["http"]["requests"] != 8; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stats = stats_.ToJson();
  }
  EXPECT_EQ(stats["http"]["requests"], 8) << stats.dump();
}

TEST_F(HttpServerTest, BadRequestBodiesGet400AndTheConnectionStays) {
  StartServer();
  tcp::socket socket = Connect();
  Response r = Send(socket, http::verb::post, "/v2/models/echo/infer", "{\"inputs\": [");
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_NE(Error(r).find("request body: expected a JSON object, got invalid JSON"),
            std::string::npos) << Error(r);
  r = Send(socket, http::verb::post, "/v2/models/echo/infer",
           R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 3], "data": [1, 2]}]})");
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_EQ(Error(r), "inputs[0].data: expected 6 FP32 values for shape [2, 3], got 2");
  r = Send(socket, http::verb::post, "/v2/models/echo/infer", kInferJson,
           {{kInferenceHeaderContentLength, "99999"}});
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_NE(Error(r).find("Inference-Header-Content-Length: expected an integer"),
            std::string::npos);
  // A number whose exponent is too long to collect, then good 17-digit numbers on the same
  // connection: the first is refused as out of range, the next read exactly (issue 36's scanner).
  const std::string huge = "0." + std::string(99'999, '0') + "1e1000000";
  r = Send(
      socket, http::verb::post, "/v2/models/echo/infer",
      R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [)" + huge + "]}]}");
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_EQ(Send(socket, http::verb::get, "/v2/health/live").result_int(), 200);
  EXPECT_EQ(loop_->requests(), 1);  // only the health check reached the loop
  r = Send(socket, http::verb::post, "/v2/models/echo/infer",
           R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [3],
               "data": [0.4731886386871338, 0.50000002980232239, -1e-3]}]})");
  ASSERT_EQ(r.result_int(), 200) << r.body();
  // Read as float32, written back in float32's shortest form; the tie reads as the even 0.5.
  EXPECT_NE(r.body().find("\"data\":[0.47318864,0.5,-0.001]"), std::string::npos) << r.body();
}

TEST_F(HttpServerTest, MalformedHttpGets400AndClose) {
  StartServer();
  tcp::socket socket = Connect();
  asio::write(socket, asio::buffer(std::string("POST /v2/models/echo/infer HTTP/1.1\r\n"
                                               "Content-Length: abc\r\n\r\n")));
  std::string received;
  EXPECT_TRUE(ClosedWithin(socket, std::chrono::seconds(5), &received));
  EXPECT_EQ(received.rfind("HTTP/1.1 400", 0), 0u) << received;
  EXPECT_NE(received.find("malformed HTTP request"), std::string::npos) << received;

  tcp::socket garbage = Connect();
  asio::write(garbage, asio::buffer(std::string("\x01\x02 not http\r\n\r\n")));
  received.clear();
  EXPECT_TRUE(ClosedWithin(garbage, std::chrono::seconds(5), &received));
  EXPECT_EQ(received.rfind("HTTP/1.1 400", 0), 0u) << received;
}

TEST_F(HttpServerTest, HeaderTooLargeGets431) {
  FrontendConfig config;
  config.max_header_bytes = 2048;
  StartServer(config);
  tcp::socket socket = Connect();
  asio::write(socket, asio::buffer("GET /v2/health/live HTTP/1.1\r\nX-Big: " +
                                   std::string(4096, 'a') + "\r\n\r\n"));
  std::string received;
  EXPECT_TRUE(ClosedWithin(socket, std::chrono::seconds(5), &received));
  EXPECT_EQ(received.rfind("HTTP/1.1 431", 0), 0u) << received.substr(0, 200);
  EXPECT_NE(received.find("frontend.max_header_bytes (2048 bytes)"), std::string::npos);
}

TEST_F(HttpServerTest, BodyTooLargeGets413) {
  FrontendConfig config;
  config.max_body_bytes = 4096;
  StartServer(config);
  tcp::socket socket = Connect();
  asio::write(socket, asio::buffer(std::string("POST /v2/models/echo/infer HTTP/1.1\r\n"
                                               "Content-Length: 100000\r\n\r\n")));
  std::string received;
  EXPECT_TRUE(ClosedWithin(socket, std::chrono::seconds(5), &received));
  EXPECT_EQ(received.rfind("HTTP/1.1 413", 0), 0u) << received;
  EXPECT_NE(received.find("frontend.max_body_bytes (4096 bytes)"), std::string::npos);
}

// Bodies held at once over all connections are bounded: slow uploads cannot pile up
// max_connections x max_body_bytes in the supervisor.
TEST_F(HttpServerTest, BodiesPastTheInflightBudgetGet429UntilOneIsAnswered) {
  FrontendConfig config;
  config.max_body_bytes = 4096;
  config.max_inflight_body_bytes = 8192;
  StartServer(config);
  const std::string header = "POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\n"
                             "Content-Length: 4096\r\n\r\n";
  // Two uploads hold the whole budget while their bodies are still arriving.
  tcp::socket first = Connect();
  tcp::socket second = Connect();
  asio::write(first, asio::buffer(header + "{"));
  asio::write(second, asio::buffer(header + "{"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  tcp::socket third = Connect();
  asio::write(third, asio::buffer(header + std::string(4096, ' ')));
  std::string received;
  EXPECT_TRUE(ClosedWithin(third, std::chrono::seconds(5), &received));
  EXPECT_EQ(received.rfind("HTTP/1.1 429", 0), 0u) << received;
  EXPECT_NE(received.find("frontend.max_inflight_body_bytes (8192)"), std::string::npos)
      << received;
  // The first upload ends (a 400: its body is not JSON): its share is free again.
  asio::write(first, asio::buffer(std::string(4095, ' ')));
  const Response answer = Read(first);
  EXPECT_EQ(answer.result_int(), 400) << answer.body();
  EXPECT_EQ(Send(first, http::verb::get, "/v2/health/live").result_int(), 200);
  tcp::socket fourth = Connect();
  json body = {{"inputs", json::array()}};
  EXPECT_NE(Send(fourth, http::verb::post, "/v2/models/echo/infer", body.dump()).result_int(),
            429);
}

TEST_F(HttpServerTest, ShortBodyAndSlowLorisGet408AndClose) {
  FrontendConfig config;
  config.request_timeout_ms = 400;
  StartServer(config);
  // Content-Length promises more than comes.
  tcp::socket short_body = Connect();
  asio::write(short_body, asio::buffer(std::string("POST /v2/models/echo/infer HTTP/1.1\r\n"
                                                   "Content-Length: 100\r\n\r\n{}")));
  std::string received;
  EXPECT_TRUE(ClosedWithin(short_body, std::chrono::seconds(3), &received));
  EXPECT_EQ(received.rfind("HTTP/1.1 408", 0), 0u) << received;
  EXPECT_NE(received.find("frontend.request_timeout_ms (400 ms)"), std::string::npos);

  // A header dripping in a byte at a time is cut off at request_timeout_ms, not idle time.
  tcp::socket loris = Connect();
  const std::string request = "GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: " +
                              std::string(200, 'z') + "\r\n\r\n";
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  for (char c : request) {
    boost::system::error_code ec;
    asio::write(loris, asio::buffer(&c, 1), ec);
    if (ec) break;
    pollfd fd{loris.native_handle(), POLLIN, 0};
    if (::poll(&fd, 1, 50) > 0) {
      received.clear();
      closed = ClosedWithin(loris, std::chrono::seconds(2), &received);
      break;
    }
  }
  EXPECT_TRUE(closed);
  EXPECT_EQ(received.rfind("HTTP/1.1 408", 0), 0u)
      << "[" << received << "] after " << (std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));

  // A connection that never sends anything is closed without an answer.
  tcp::socket silent = Connect();
  received.clear();
  EXPECT_TRUE(ClosedWithin(silent, std::chrono::seconds(3), &received));
  EXPECT_EQ(received, "");
}

TEST_F(HttpServerTest, IdleKeepAliveConnectionsClose) {
  FrontendConfig config;
  config.idle_timeout_ms = 300;
  StartServer(config);
  tcp::socket socket = Connect();
  EXPECT_EQ(Send(socket, http::verb::get, "/v2/health/live").result_int(), 200);
  const auto start = std::chrono::steady_clock::now();
  std::string received;
  EXPECT_TRUE(ClosedWithin(socket, std::chrono::seconds(3), &received));
  EXPECT_EQ(received, "");
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250));
}

TEST_F(HttpServerTest, ExpectContinueGetsA100BeforeTheBody) {
  StartServer();
  tcp::socket socket = Connect();
  asio::write(socket, asio::buffer("POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\n"
                                   "Expect: 100-continue\r\nContent-Length: " +
                                   std::to_string(kInferJson.size()) + "\r\n\r\n"));
  char buffer[64] = {};
  const size_t n = socket.read_some(asio::buffer(buffer, 25));
  EXPECT_EQ(std::string(buffer, n).rfind("HTTP/1.1 100 Continue", 0), 0u);
  asio::write(socket, asio::buffer(kInferJson));
  EXPECT_EQ(Read(socket).result_int(), 200);
}

TEST_F(HttpServerTest, AThousandIdleConnectionsOverMaxConnectionsAreClosed) {
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur < 2200) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 4096);
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur < 2200) GTEST_SKIP() << "RLIMIT_NOFILE " << limit.rlim_cur << " < 2200";
  FrontendConfig config;
  config.max_connections = 100;
  StartServer(config);
  std::vector<tcp::socket> sockets;
  for (int i = 0; i < 1000; ++i) sockets.push_back(Connect());
  // Every connection past the 100th is closed at once; the first 100 stay open and serve.
  int closed = 0;
  for (auto& socket : sockets) closed += ClosedWithin(socket, std::chrono::milliseconds(5));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (closed < 900 && std::chrono::steady_clock::now() < deadline) {
    closed = 0;
    for (auto& socket : sockets) {
      pollfd fd{socket.native_handle(), POLLIN, 0};
      char byte;
      closed += ::poll(&fd, 1, 0) > 0 && ::recv(socket.native_handle(), &byte, 1, MSG_PEEK) == 0;
    }
  }
  EXPECT_EQ(closed, 900);
  EXPECT_EQ(Send(sockets[0], http::verb::get, "/v2/health/live").result_int(), 200);
  EXPECT_EQ(Send(sockets[99], http::verb::get, "/v2/health/live").result_int(), 200);
  sockets.clear();
  // Once they close, new connections are served again.
  const auto retry = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int status = 0;
  while (status != 200 && std::chrono::steady_clock::now() < retry) {
    try {
      status = Get("/v2/health/live").result_int();
    } catch (const boost::system::system_error& e) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // still counted as open
    }
  }
  EXPECT_EQ(status, 200);
}

TEST_F(HttpServerTest, StopClosesOpenConnections) {
  StartServer();
  tcp::socket socket = Connect();
  EXPECT_EQ(Send(socket, http::verb::get, "/v2/health/live").result_int(), 200);
  server_->Stop();
  EXPECT_TRUE(ClosedWithin(socket, std::chrono::seconds(3)));
  boost::system::error_code ec;
  tcp::socket late(io_);
  late.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()), ec);
  EXPECT_TRUE(ec) << "the listening socket is closed";
}

// Stop (the supervisor's exit after a drain) used to close every connection at once: a response
// still being written was cut, and a request waiting for the farm got no answer at all.
TEST_F(HttpServerTest, StopFinishesTheResponseBeingWrittenAndAnswersWaitingRequests) {
  StartServer();
  const size_t kBytes = 48u << 20;  // far more than the sockets buffer: the write is in progress
  const json header = {{"inputs", {{{"name", "x"}, {"datatype", "UINT8"},
                                    {"shape", {kBytes}},
                                    {"parameters", {{"binary_data_size", kBytes}}}}}},
                       {"parameters", {{"binary_data_output", true}}}};
  const std::string json_text = header.dump();
  std::string body = json_text + std::string(kBytes, 'z');
  http::request<http::string_body> request(http::verb::post, "/v2/models/echo/infer", 11);
  request.set(http::field::host, "localhost");
  request.set(kInferenceHeaderContentLength, std::to_string(json_text.size()));
  request.body() = std::move(body);
  request.prepare_payload();
  tcp::socket big = Connect();
  http::write(big, request);  // the server reads it all, then writes the echo we do not read yet
  tcp::socket waiting = Connect();
  http::request<http::string_body> silent(http::verb::post, "/v2/models/silent/infer", 11);
  silent.set(http::field::host, "localhost");
  silent.body() = kInferJson;
  silent.prepare_payload();
  http::write(waiting, silent);
  for (int i = 0; i < 500 && loop_->requests() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(loop_->requests(), 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::thread stopper([&] { server_->Stop(); });
  http::response_parser<http::string_body> parser;
  parser.body_limit(kBytes * 2);
  boost::beast::flat_buffer buffer;
  boost::system::error_code ec;
  http::read(big, buffer, parser, ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(parser.get().result_int(), 200);
  EXPECT_EQ(parser.get().body().size(),
            std::stoul(std::string(parser.get()[kInferenceHeaderContentLength])) + kBytes);
  Response unanswered;
  boost::beast::flat_buffer waiting_buffer;
  http::read(waiting, waiting_buffer, unanswered, ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(unanswered.result_int(), 503);
  EXPECT_EQ(Error(unanswered), "the supervisor is shutting down");
  stopper.join();
  // Its headers went out before the stop (keep-alive), but the connection closes after it.
  EXPECT_TRUE(ClosedWithin(big, std::chrono::seconds(3)));
}

TEST_F(HttpServerTest, StartErrorsNameTheEndpointOrTheTlsFile) {
  StartServer();
  FrontendConfig config;
  config.http_endpoint = "127.0.0.1:" + std::to_string(server_->port());
  std::unique_ptr<HttpServer> second;
  Status s = HttpServer::Start(config, {channel_.get()}, &stats_, &second);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("http_endpoint '" + config.http_endpoint + "': cannot listen"),
            std::string::npos) << s.message();
  config.http_endpoint = "127.0.0.1:0";
  config.tls.cert_file = "/nonexistent/cert.pem";
  config.tls.key_file = "/nonexistent/key.pem";
  s = HttpServer::Start(config, {channel_.get()}, &stats_, &second);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("frontend.tls.cert_file '/nonexistent/cert.pem'"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace torchfarm
