// torchfarm-v2-http-load: closed-loop load over the Open Inference Protocol's HTTP binary path
// (KServe v2 + Triton's binary tensor extension), for docs/benchmarks.md ("KServe v2 front
// ends"). `--concurrency` keep-alive connections on one thread, each sending its next request as
// soon as the last answer arrived, for `--seconds`; prints one JSON line: requests, errors,
// req_s, p50_us, p99_us. The same client measures the farm (`--path /v2/models/M/infer`) and the
// bare echo server (torchfarm-http-echo), so their ratio is the front end's own cost.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

struct Totals {
  std::vector<int64_t> latencies_us;
  uint64_t errors = 0;
  Clock::time_point measure_from;
  Clock::time_point end;
};

// One keep-alive connection sending the same binary request over and over.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(asio::io_context& io, const http::request<http::string_body>& request, Totals& totals)
      : stream_(io), request_(request), totals_(totals) {}

  void Start(const tcp::endpoint& endpoint) {
    stream_.async_connect(endpoint, [self = shared_from_this()](beast::error_code error) {
      if (error) {
        self->totals_.errors++;
        return;
      }
      self->stream_.socket().set_option(tcp::no_delay(true));
      self->Send();
    });
  }

 private:
  void Send() {
    if (Clock::now() >= totals_.end) return;
    sent_ = Clock::now();
    http::async_write(stream_, request_, [self = shared_from_this()](beast::error_code error, size_t) {
      if (error) {
        self->totals_.errors++;
        return;
      }
      self->Receive();
    });
  }
  void Receive() {
    response_ = {};
    http::async_read(stream_, buffer_, response_,
                     [self = shared_from_this()](beast::error_code error, size_t) {
                       if (error) {
                         self->totals_.errors++;
                         return;
                       }
                       const auto now = Clock::now();
                       if (self->response_.result() != http::status::ok) {
                         self->totals_.errors++;
                       } else if (self->sent_ >= self->totals_.measure_from) {
                         self->totals_.latencies_us.push_back(
                             std::chrono::duration_cast<std::chrono::microseconds>(now - self->sent_)
                                 .count());
                       }
                       self->Send();
                     });
  }

  beast::tcp_stream stream_;
  const http::request<http::string_body>& request_;
  Totals& totals_;
  beast::flat_buffer buffer_;
  http::response<http::string_body> response_;
  Clock::time_point sent_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"torchfarm-v2-http-load: closed-loop KServe v2 binary HTTP load"};
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string path = "/v2/models/identity/infer";
  std::string input_name = "INPUT__0";
  int elements = 256;
  int concurrency = 1;
  double seconds = 5;
  double warmup_s = 1;
  app.add_option("--host", host);
  app.add_option("--port", port)->check(CLI::Range(1, 65535));
  app.add_option("--path", path, "request target");
  app.add_option("--input", input_name, "v2 input name");
  app.add_option("--elements", elements, "FP32 elements of the [1, N] input")
      ->check(CLI::Range(1, 1 << 26));
  app.add_option("--concurrency", concurrency)->check(CLI::Range(1, 4096));
  app.add_option("--seconds", seconds, "measured time")->check(CLI::Range(0.1, 3600.0));
  app.add_option("--warmup-s", warmup_s, "unmeasured time first")->check(CLI::Range(0.0, 600.0));
  CLI11_PARSE(app, argc, argv);

  const nlohmann::json header = {
      {"inputs", {{{"name", input_name}, {"datatype", "FP32"}, {"shape", {1, elements}},
                   {"parameters", {{"binary_data_size", elements * 4}}}}}},
      {"parameters", {{"binary_data_output", true}}}};
  const std::string json_text = header.dump();
  std::string body = json_text;
  std::vector<float> values(static_cast<size_t>(elements));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  body.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  http::request<http::string_body> request{http::verb::post, path, 11};
  request.set(http::field::host, host);
  request.set(http::field::content_type, "application/octet-stream");
  request.set("Inference-Header-Content-Length", std::to_string(json_text.size()));
  request.keep_alive(true);
  request.body() = body;
  request.prepare_payload();

  asio::io_context io(1);
  Totals totals;
  totals.measure_from = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(warmup_s));
  totals.end = totals.measure_from + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(seconds));
  const tcp::endpoint endpoint(asio::ip::make_address(host), static_cast<uint16_t>(port));
  for (int i = 0; i < concurrency; ++i) {
    std::make_shared<Connection>(io, request, totals)->Start(endpoint);
  }
  io.run();
  auto& l = totals.latencies_us;
  std::sort(l.begin(), l.end());
  auto pct = [&](double p) {
    return l.empty() ? 0 : l[std::min(l.size() - 1, static_cast<size_t>(p / 100.0 * l.size()))];
  };
  nlohmann::json out = {{"requests", l.size()},     {"errors", totals.errors},
                        {"req_s", l.size() / seconds}, {"p50_us", pct(50)},
                        {"p99_us", pct(99)},        {"concurrency", concurrency}};
  std::printf("%s\n", out.dump().c_str());
  return totals.errors == 0 ? 0 : 1;
}
