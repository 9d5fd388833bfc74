// One HTTP/1.1 request to a farm's front end on 127.0.0.1, for the integration tests of the KServe
// v2 front ends (kserve_v2_*_test.cc): a fresh connection per request, an answer within a bound
// or none (status 0), so a request the farm never answers fails its test instead of hanging it.
// HttpKeepAlive keeps one connection for several requests. Header-only test code: Boost.Beast, no
// farm types. Runs on the calling test's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace torchfarm::testing {

struct HttpReply {
  int status = 0;  // 0: no answer within the bound
  std::string body;
  std::map<std::string, std::string> headers;
  std::chrono::steady_clock::duration took{};  // from the first byte sent to the answer (or bound)
  nlohmann::json Json() const { return nlohmann::json::parse(body, nullptr, false); }
};

// One keep-alive HTTP/1.1 connection to 127.0.0.1:`port`, for tests that need a later request on
// the same connection (a bad request must cost no more than itself). Each Send waits at most
// `bound`; after an unanswered one the connection is not to be used again.
class HttpKeepAlive {
 public:
  explicit HttpKeepAlive(int port) : socket_(io_) {
    socket_.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"),
                                                   static_cast<uint16_t>(port)));
  }

  HttpReply Send(boost::beast::http::verb verb, const std::string& target,
                 const std::string& body = {},
                 const std::map<std::string, std::string>& headers = {},
                 std::chrono::milliseconds bound = std::chrono::seconds(10)) {
    namespace http = boost::beast::http;
    http::request<http::string_body> request{verb, target, 11};

    request.set(http::field::host, "127.0.0.1");
    for (const auto& [name, value] : headers) request.set(name, value);
    request.body() = body;
    if (verb == http::verb::post) request.prepare_payload();
    http::response<http::string_body> response;
    bool answered = false;
    const auto start = std::chrono::steady_clock::now();
    http::async_write(socket_, request, [&](boost::beast::error_code ec, size_t) {
      if (ec) return;
      http::async_read(socket_, buffer_, response,
                       [&](boost::beast::error_code read_ec, size_t) { answered = !read_ec; });
    });
    io_.restart();
    io_.run_for(bound);
    HttpReply out;
    out.took = std::chrono::steady_clock::now() - start;
    if (answered) {
      out.status = response.result_int();
      out.body = response.body();
      for (const auto& field : response) {
        out.headers[std::string(field.name_string())] = std::string(field.value());
      }
    }
    return out;
  }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
};

// `verb` `target` with `body` and `headers` on a new connection to 127.0.0.1:`port`; a POST gets
// Content-Length. Waits at most `bound` for the whole answer.
inline HttpReply HttpOnce(int port, boost::beast::http::verb verb, const std::string& target,
                          const std::string& body = {},
                          const std::map<std::string, std::string>& headers = {},
                          std::chrono::milliseconds bound = std::chrono::seconds(10)) {
  return HttpKeepAlive(port).Send(verb, target, body, headers, bound);
}

}  // namespace torchfarm::testing
