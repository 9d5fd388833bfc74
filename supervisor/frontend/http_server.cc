// HttpServer (http_server.h): the listening socket. It accepts on channels[0]'s thread and hands
// each connection to the next channel round-robin (the socket is created on that channel's
// io_context), or closes it at once when max_connections are open. Connections (HttpSession)
// share HttpServerState with the server, so none refers to the server object itself.
#include "supervisor/frontend/http_server.h"

#include <atomic>
#include <chrono>
#include <future>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/log.h"
#include "supervisor/frontend/http_session.h"

namespace torchfarm {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// How long Stop waits for a channel thread to run its part, and for connections to close.
constexpr auto kStopWait = std::chrono::seconds(2);
// A failed accept (EMFILE, ENFILE, ...) is retried after this pause instead of spinning.
constexpr auto kAcceptRetry = std::chrono::milliseconds(50);

// Runs `work` on `io`'s thread and waits for it (at most kStopWait: the thread may be gone).
// False when it did not run in that time.
bool RunOn(asio::io_context& io, std::function<void()> work) {
  if (io.get_executor().running_in_this_thread()) {
    work();
    return true;
  }
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  asio::post(io, [work = std::move(work), done] {
    work();
    done->set_value();
  });
  return finished.wait_for(kStopWait) == std::future_status::ready;
}

Status LoadTls(const TlsConfig& tls, std::shared_ptr<asio::ssl::context>* out) {
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  context->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                       asio::ssl::context::no_tlsv1_1);
  boost::system::error_code ec;
  context->use_certificate_chain_file(tls.cert_file, ec);
  if (ec) {
    return InvalidArgument("frontend.tls.cert_file '" + tls.cert_file +
                           "': cannot load a PEM certificate chain: " + ec.message());
  }
  context->use_private_key_file(tls.key_file, asio::ssl::context::pem, ec);
  if (ec) {
    return InvalidArgument("frontend.tls.key_file '" + tls.key_file +
                           "': cannot load a PEM private key matching cert_file: " +
                           ec.message());
  }
  *out = std::move(context);
  return Status::Ok();
}

Status Resolve(const std::string& endpoint, tcp::endpoint* out) {
  std::string host;
  int port = 0;
  if (Status s = SplitHostPort(endpoint, "http_endpoint", &host, &port); !s.ok()) return s;
  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (!ec) {
    *out = tcp::endpoint(address, static_cast<uint16_t>(port));
    return Status::Ok();
  }
  asio::io_context io;
  tcp::resolver resolver(io);
  auto results = resolver.resolve(host, std::to_string(port), ec);
  if (ec || results.empty()) {
    return Unavailable("http_endpoint '" + endpoint + "': cannot resolve host '" + host +
                       "': " + ec.message());
  }
  *out = results.begin()->endpoint();
  return Status::Ok();
}

// The accept loop; lives as long as an accept is pending.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(std::shared_ptr<HttpServerState> state, std::vector<FarmChannel*> channels)
      : state_(std::move(state)), channels_(std::move(channels)),
        acceptor_(channels_[0]->io()), retry_(channels_[0]->io()) {}

  Status Bind(const std::string& endpoint) {
    tcp::endpoint where;
    if (Status s = Resolve(endpoint, &where); !s.ok()) return s;
    boost::system::error_code ec;
    acceptor_.open(where.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(where, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Unavailable("http_endpoint '" + endpoint + "': cannot listen: " + ec.message());
    port_ = acceptor_.local_endpoint(ec).port();
    return Status::Ok();
  }

  void Accept() {
    FarmChannel* channel = channels_[next_++ % channels_.size()];
    accept_pending_ = true;
    acceptor_.async_accept(channel->io(), [self = shared_from_this(), channel](
                                              boost::system::error_code ec, tcp::socket socket) {
      self->OnAccept(ec, std::move(socket), channel);
    });
  }

  void CloseAcceptor() {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    retry_.cancel();
  }

  int port() const { return port_; }
  // An accept is waiting or its handler has not run yet. Its handler holds a socket of another
  // channel's io_context: that context must outlive it, so Stop waits for it to run.
  bool accept_pending() const { return accept_pending_.load(); }
  const std::shared_ptr<HttpServerState>& state() const { return state_; }
  const std::vector<FarmChannel*>& channels() const { return channels_; }

 private:
  void OnAccept(boost::system::error_code ec, tcp::socket socket, FarmChannel* channel) {
    accept_pending_ = false;
    if (ec == asio::error::operation_aborted || state_->stopping) return;
    if (ec) {
      TF_LOG(kWarn) << "http: accept failed; retrying" << Kv("error", ec.message());
      retry_.expires_after(kAcceptRetry);
      retry_.async_wait([self = shared_from_this()](boost::system::error_code wait_ec) {
        if (!wait_ec && !self->state_->stopping) self->Accept();
      });
      return;
    }
    if (state_->open.load() >= state_->config.max_connections) {
      boost::system::error_code ignored;
      socket.close(ignored);  // over frontend.max_connections: closed at once
    } else {
      state_->open.fetch_add(1);
      auto executor = socket.get_executor();
      asio::post(executor, [state = state_, channel, socket = std::move(socket)]() mutable {
        if (!state->stopping) return StartHttpSession(std::move(socket), std::move(state), channel);
        boost::system::error_code ignored;
        socket.close(ignored);
        std::lock_guard<std::mutex> lock(state->mutex);
        state->open.fetch_sub(1);
        state->all_closed.notify_all();
      });
    }
    Accept();
  }

  std::shared_ptr<HttpServerState> state_;
  std::vector<FarmChannel*> channels_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  size_t next_ = 0;
  int port_ = 0;
  std::atomic<bool> accept_pending_{false};
};

}  // namespace

class HttpServer::Impl {
 public:
  explicit Impl(std::shared_ptr<Listener> listener) : listener_(std::move(listener)) {}
  std::shared_ptr<Listener> listener_;
  bool stopped_ = false;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

int HttpServer::port() const { return impl_->listener_->port(); }

Status HttpServer::Start(const FrontendConfig& config, std::vector<FarmChannel*> channels,
                         FrontendStats* stats, std::unique_ptr<HttpServer>* out) {
  if (channels.empty()) return Internal("http: no front-end channel to serve on");
  auto state = std::make_shared<HttpServerState>();
  state->config = config;
  state->stats = stats;
  if (config.tls.enabled()) {
    if (Status s = LoadTls(config.tls, &state->tls); !s.ok()) return s;
  }
  auto listener = std::make_shared<Listener>(state, std::move(channels));
  if (Status s = listener->Bind(config.http_endpoint); !s.ok()) return s;
  asio::post(listener->channels()[0]->io(), [listener] { listener->Accept(); });
  out->reset(new HttpServer(std::make_unique<Impl>(std::move(listener))));
  return Status::Ok();
}

void HttpServer::Stop() {
  if (!impl_ || impl_->stopped_) return;
  impl_->stopped_ = true;
  const std::shared_ptr<Listener>& listener = impl_->listener_;
  const std::shared_ptr<HttpServerState>& state = listener->state();
  state->stopping = true;
  asio::io_context& accepting = listener->channels()[0]->io();
  bool running = RunOn(accepting, [listener] { listener->CloseAcceptor(); });
  // The aborted accept's handler runs on the accepting thread after the close; until it has, a
  // channel stopped and destroyed would leave it holding a socket of a dead io_context.
  for (int turn = 0; running && turn < 100 && listener->accept_pending() &&
                     !accepting.get_executor().running_in_this_thread();
       ++turn) {
    running = RunOn(accepting, [] {});
  }
  std::vector<std::shared_ptr<HttpConnection>> open;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    for (auto& [id, weak] : state->connections) {
      if (auto connection = weak.lock()) open.push_back(std::move(connection));
    }
  }
  for (auto& connection : open) connection->Shutdown();
  open.clear();
  // Each connection closes on its own thread; on one of those threads, waiting would deadlock.
  for (FarmChannel* channel : listener->channels()) {
    if (channel->io().get_executor().running_in_this_thread()) return;
  }
  std::unique_lock<std::mutex> lock(state->mutex);
  if (!state->all_closed.wait_for(lock, kStopWait, [&] { return state->open.load() == 0; })) {
    TF_LOG(kWarn) << "http: connections still open after stop" << Kv("open", state->open.load());
  }
}

}  // namespace torchfarm
