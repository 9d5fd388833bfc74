// torchfarm-http-echo: the bare Boost.Beast reference for the HTTP front end's latency target
// (docs/benchmarks.md, "KServe v2 front ends"). One thread, HTTP/1.1 keep-alive, every request's
// body and Inference-Header-Content-Length echoed back: the least an HTTP inference server can
// do, so the farm's HTTP path is measured against the cost of HTTP itself on this machine.
//
// Usage: torchfarm-http-echo --port 0   (prints "port N" once listening; runs until killed)
#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

class EchoSession : public std::enable_shared_from_this<EchoSession> {
 public:
  explicit EchoSession(tcp::socket socket) : stream_(std::move(socket)) {}
  void Read() {
    request_ = {};
    http::async_read(stream_, buffer_, request_,
                     [self = shared_from_this()](beast::error_code error, size_t) {
                       if (!error) self->Reply();
                     });
  }

 private:
  void Reply() {
    response_ = {};
    response_.result(http::status::ok);
    response_.version(request_.version());
    response_.keep_alive(request_.keep_alive());
    response_.set(http::field::content_type, "application/octet-stream");
    if (auto it = request_.find("Inference-Header-Content-Length"); it != request_.end()) {
      response_.set("Inference-Header-Content-Length", it->value());
    }
    response_.body() = std::move(request_.body());
    response_.prepare_payload();
    http::async_write(stream_, response_,
                      [self = shared_from_this()](beast::error_code error, size_t) {
                        if (!error && self->response_.keep_alive()) self->Read();
                      });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
};

void Accept(tcp::acceptor& acceptor) {
  acceptor.async_accept([&acceptor](beast::error_code error, tcp::socket socket) {
    if (!error) {
      socket.set_option(tcp::no_delay(true));
      std::make_shared<EchoSession>(std::move(socket))->Read();
    }
    Accept(acceptor);
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"torchfarm-http-echo: a bare Boost.Beast echo server (benchmark reference)"};
  int port = 0;
  app.add_option("--port", port, "TCP port on 127.0.0.1 (0: any free port)")
      ->check(CLI::Range(0, 65535));
  CLI11_PARSE(app, argc, argv);
  asio::io_context io(1);
  tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)});
  std::printf("port %d\n", acceptor.local_endpoint().port());
  std::fflush(stdout);
  Accept(acceptor);
  io.run();
  return 0;
}
