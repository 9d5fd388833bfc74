// torchfarm-v2-http-load: the closed-loop HTTP/1.1 keep-alive load generator of the benchmarks
// (docs/benchmarks.md: "KServe v2 front ends" and "Against other servers"). `--concurrency`
// keep-alive connections on one thread, each sending its next request as soon as the last answer
// arrived, for `--warmup-s` unmeasured and then `--seconds` measured; prints one JSON line:
// requests, errors, req_s, p50_us, p99_us, its own CPU seconds and the requests it sent in all.
// The answers that arrive within the measured window count (latency and rate), whenever their
// request was sent; nothing is sent after the window, and answers still on the way are awaited
// but not counted.
//
// The request is the Open Inference Protocol's binary tensor body by default (`--input`,
// `--elements`: FP32 [1, N] to `--path`), or any body from `--body-file` with `--content-type`
// and extra `--header "Name: value"` lines, so the one client drives torchfarm, Triton,
// TorchServe, Ray Serve and LitServe (bench/peers/) and the bare echo server
// (torchfarm-http-echo), and nobody's client is the bottleneck or the advantage.
// `--save-responses DIR` writes the first few good answers' bodies (after warm-up) to
// DIR/response-K.bin for the caller to check against PyTorch.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// Good answers kept for the caller's correctness check (--save-responses).
constexpr int kSavedResponses = 4;
// A response body larger than this is an error (resnet18's [1, 1000] output is 4 KB).
constexpr uint64_t kBodyLimit = 256ull << 20;

struct Totals {
  std::vector<int64_t> latencies_us;
  uint64_t errors = 0;
  uint64_t sent = 0;
  std::string first_error;
  std::string save_dir;
  int saved = 0;
  Clock::time_point measure_from;
  Clock::time_point end;
};

void CountError(Totals& totals, const std::string& what) {
  totals.errors++;
  if (totals.first_error.empty()) totals.first_error = what;
}

void SaveResponse(Totals& totals, const std::string& body) {
  if (totals.save_dir.empty() || totals.saved >= kSavedResponses) return;
  std::ofstream out(totals.save_dir + "/response-" + std::to_string(totals.saved++) + ".bin",
                    std::ios::binary);
  out.write(body.data(), static_cast<std::streamsize>(body.size()));
}

// One keep-alive connection sending the same request over and over; a broken connection counts
// one error and is opened again (as is one the server closed after answering, without an error),
// so the concurrency stays what was asked.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(asio::io_context& io, const tcp::endpoint& endpoint,
             const http::request<http::string_body>& request, Totals& totals)
      : io_(io), endpoint_(endpoint), stream_(io), request_(request), totals_(totals) {}

  void Start() {
    if (Clock::now() >= totals_.end) return;
    stream_.async_connect(endpoint_, [self = shared_from_this()](beast::error_code error) {
      if (error) {
        CountError(self->totals_, "connect: " + error.message());
        return;  // the server is not there: retrying would only count the same error again
      }
      self->stream_.socket().set_option(tcp::no_delay(true));
      self->Send();
    });
  }

 private:
  // what: the error to count; empty when the server closed the connection after a good answer.
  void Reconnect(const std::string& what) {
    if (!what.empty()) CountError(totals_, what);
    beast::error_code ignored;
    stream_.socket().close(ignored);
    auto fresh = std::make_shared<Connection>(io_, endpoint_, request_, totals_);
    fresh->Start();
  }
  void Send() {
    if (Clock::now() >= totals_.end) return;
    sent_ = Clock::now();
    totals_.sent++;
    http::async_write(stream_, request_,
                      [self = shared_from_this()](beast::error_code error, size_t) {
                        if (error) return self->Reconnect("write: " + error.message());
                        self->Receive();
                      });
  }
  void Receive() {
    parser_.emplace();
    parser_->body_limit(kBodyLimit);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code error, size_t) { self->Answered(error); });
  }
  void Answered(beast::error_code error) {
    if (error) return Reconnect("read: " + error.message());
    const auto now = Clock::now();
    const auto& response = parser_->get();
    if (response.result() != http::status::ok) {
      CountError(totals_, "HTTP " + std::to_string(response.result_int()) + ": " +
                              response.body().substr(0, 300));
    } else if (now >= totals_.measure_from && now <= totals_.end) {
      totals_.latencies_us.push_back(
          std::chrono::duration_cast<std::chrono::microseconds>(now - sent_).count());
      SaveResponse(totals_, response.body());
    }
    if (!response.keep_alive()) return Reconnect("");
    Send();
  }

  asio::io_context& io_;
  tcp::endpoint endpoint_;
  beast::tcp_stream stream_;
  const http::request<http::string_body>& request_;
  Totals& totals_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> parser_;
  Clock::time_point sent_;
};

std::string V2BinaryBody(const std::string& input_name, int elements, std::string* json_length) {
  const nlohmann::json header = {{"inputs",
                                  {{{"name", input_name},
                                    {"datatype", "FP32"},
                                    {"shape", {1, elements}},
                                    {"parameters", {{"binary_data_size", elements * 4}}}}}},
                                 {"parameters", {{"binary_data_output", true}}}};
  std::string body = header.dump();
  *json_length = std::to_string(body.size());
  std::vector<float> values(static_cast<size_t>(elements));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  body.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return body;
}

// "Name: value" -> the request's header; false with a message naming what was expected.
bool AddHeader(http::request<http::string_body>& request, const std::string& line) {
  const auto colon = line.find(':');
  if (colon == std::string::npos || colon == 0) {
    std::fprintf(stderr, "--header: expected \"Name: value\", got \"%s\"\n", line.c_str());
    return false;
  }
  const auto start = line.find_first_not_of(' ', colon + 1);
  request.set(line.substr(0, colon), start == std::string::npos ? "" : line.substr(start));
  return true;
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

Clock::time_point After(Clock::time_point from, double seconds) {
  return from + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "torchfarm-v2-http-load: closed-loop HTTP/1.1 keep-alive load (KServe v2 or any body)"};
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string path = "/v2/models/identity/infer";
  std::string input_name = "INPUT__0";
  int elements = 256;
  int concurrency = 1;
  double seconds = 5;
  double warmup_s = 1;
  std::string body_file, content_type = "application/octet-stream", save_dir;
  std::vector<std::string> headers;
  app.add_option("--host", host);
  app.add_option("--port", port)->check(CLI::Range(1, 65535));
  app.add_option("--path", path, "request target");
  app.add_option("--input", input_name, "v2 input name (without --body-file)");
  app.add_option("--elements", elements,
                 "FP32 elements of the [1, N] v2 input (without --body-file)")
      ->check(CLI::Range(1, 1 << 26));
  app.add_option("--body-file", body_file, "send this file's bytes as the body instead")
      ->check(CLI::ExistingFile);
  app.add_option("--content-type", content_type, "Content-Type of the request");
  app.add_option("--header", headers, "extra request header \"Name: value\" (repeatable)");
  app.add_option("--save-responses", save_dir, "write the first good answers' bodies here")
      ->check(CLI::ExistingDirectory);
  app.add_option("--concurrency", concurrency)->check(CLI::Range(1, 4096));
  app.add_option("--seconds", seconds, "measured time")->check(CLI::Range(0.1, 3600.0));
  app.add_option("--warmup-s", warmup_s, "unmeasured time first")->check(CLI::Range(0.0, 600.0));
  CLI11_PARSE(app, argc, argv);

  http::request<http::string_body> request{http::verb::post, path, 11};
  request.set(http::field::host, host);
  request.set(http::field::content_type, content_type);
  if (body_file.empty()) {
    std::string json_length;
    request.body() = V2BinaryBody(input_name, elements, &json_length);
    request.set("Inference-Header-Content-Length", json_length);
  } else {
    std::ifstream in(body_file, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    request.body() = bytes.str();
  }
  for (const auto& line : headers) {
    if (!AddHeader(request, line)) return 2;
  }
  request.keep_alive(true);
  request.prepare_payload();

  asio::io_context io(1);
  Totals totals;
  totals.save_dir = save_dir;
  totals.measure_from = After(Clock::now(), warmup_s);
  totals.end = After(totals.measure_from, seconds);
  const double cpu_before = CpuSeconds();
  const tcp::endpoint endpoint(asio::ip::make_address(host), static_cast<uint16_t>(port));
  for (int i = 0; i < concurrency; ++i) {
    std::make_shared<Connection>(io, endpoint, request, totals)->Start();
  }
  io.run();
  auto& l = totals.latencies_us;
  std::sort(l.begin(), l.end());
  auto pct = [&](double p) {
    return l.empty() ? 0 : l[std::min(l.size() - 1, static_cast<size_t>(p / 100.0 * l.size()))];
  };
  nlohmann::json out = {{"requests", l.size()},
                        {"errors", totals.errors},
                        {"req_s", l.size() / seconds},
                        {"p50_us", pct(50)},
                        {"p99_us", pct(99)},
                        {"concurrency", concurrency},
                        {"sent_total", totals.sent},
                        {"cpu_s", CpuSeconds() - cpu_before},
                        {"first_error", totals.first_error}};
  std::printf("%s\n", out.dump().c_str());
  return totals.errors == 0 ? 0 : 1;
}
