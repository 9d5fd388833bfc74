// HttpSession (http_session.h). One deadline timer guards every phase: the first request (or the
// TLS handshake) must begin within request_timeout_ms, a later one within idle_timeout_ms; once
// its first byte came, the whole request within request_timeout_ms; a response is written within
// request_timeout_ms. Reads go through http::async_read_some so the session sees the first byte
// of a request arrive (and switches from the idle to the request deadline) and can answer
// "Expect: 100-continue" before the body. A deadline cancels the socket's operations; the handler
// that then completes decides between a 408 and a silent close.
#include "supervisor/frontend/http_session.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>
#include <type_traits>

#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>

#include "common/int_text.h"
#include "supervisor/frontend/content_encoding.h"
#include "supervisor/frontend/dashboard.h"
#include "supervisor/frontend/http_v2_handler.h"
#include "supervisor/frontend/v2_http_codec.h"

namespace torchfarm {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using TlsStream = asio::ssl::stream<tcp::socket>;
using Clock = std::chrono::steady_clock;

// How long a closing connection reads and drops what its peer still sends (Linger).
constexpr int64_t kLingerMs = 1000;
// The first read of a request, which ends the idle wait.
constexpr size_t kFirstRead = 4096;
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

tcp::socket& Lowest(tcp::socket& socket) { return socket; }
tcp::socket& Lowest(TlsStream& stream) { return stream.next_layer(); }

std::string PeerOf(const tcp::socket& socket) {
  boost::system::error_code ec;
  const tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return "unknown";
  const auto address = peer.address();
  return (address.is_v6() ? "[" + address.to_string() + "]" : address.to_string()) + ":" +
         std::to_string(peer.port());
}

// The status line and header fields of a response, as Beast's serializer wrote them for
// http::response<string_body> with these fields set in this order and prepare_payload() (every
// answer here has a body length, and none is 1xx, 204 or 304). Written by hand: Beast's
// serializer cost ~7,500 instructions a response (issue 36).
void WriteResponseHead(const V2HttpAnswer& answer, bool keep_alive, std::string* head) {
  using namespace std::string_view_literals;
  head->clear();
  head->append("HTTP/1.1 "sv);
  AppendInt(head, answer.http_status);
  head->push_back(' ');
  const auto reason = http::obsolete_reason(static_cast<http::status>(answer.http_status));
  head->append(reason.data(), reason.size());
  head->append("\r\nServer: torchfarm\r\nContent-Type: "sv);
  head->append(answer.content_type);
  if (answer.json_bytes) {
    head->append("\r\n"sv);
    head->append(kInferenceHeaderContentLength);
    head->append(": "sv);
    AppendInt(head, *answer.json_bytes);
  }
  if (!answer.allow.empty()) {
    head->append("\r\nAllow: "sv);
    head->append(answer.allow);
  }
  for (const auto& [name, value] : answer.headers) {
    head->append("\r\n"sv);
    head->append(name);
    head->append(": "sv);
    head->append(value);
  }
  if (!keep_alive) head->append("\r\nConnection: close"sv);
  head->append("\r\nContent-Length: "sv);
  AppendInt(head, answer.body.size());
  head->append("\r\n\r\n"sv);
}

template <class Stream>
class HttpSession : public HttpConnection,
                    public std::enable_shared_from_this<HttpSession<Stream>> {
 public:
  template <class... Args>
  HttpSession(std::shared_ptr<HttpServerState> state, FarmChannel* channel, Args&&... stream)
      : state_(std::move(state)), channel_(channel), stream_(std::forward<Args>(stream)...),
        timer_(Lowest(stream_).get_executor()), peer_(PeerOf(Lowest(stream_))) {}

  // A session ends with its request's body out of the budget whatever path ended it.
  ~HttpSession() override {
    ReleaseBody();
    Release();
  }

  void Start() {
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      Arm(state_->config.request_timeout_ms, Phase::kHandshake);
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](boost::system::error_code ec) {
                                self->Disarm();
                                if (ec) return self->Close();
                                self->ReadRequest(self->state_->config.request_timeout_ms);
                              });
    } else {
      ReadRequest(state_->config.request_timeout_ms);
    }
  }

  // The server is stopping: a response being written is finished first (then the connection
  // lingers and closes), a request waiting for the farm is answered 503 now, any other state
  // closes at once.
  void Shutdown() override {
    asio::post(timer_.get_executor(), [weak = this->weak_from_this()] {
      if (auto self = weak.lock()) self->OnShutdown();
    });
  }

 private:
  enum class Phase { kHandshake, kIdle, kRequest, kFarm, kWrite };

  void Arm(int64_t ms, Phase phase) {
    phase_ = phase;
    const uint64_t generation = ++generation_;
    timer_.expires_after(std::chrono::milliseconds(ms));
    timer_.async_wait([self = this->shared_from_this(), generation](boost::system::error_code ec) {
      if (ec || generation != self->generation_) return;
      self->OnDeadline();
    });
  }

  void Disarm() {
    ++generation_;
    timer_.cancel();
  }

  void OnDeadline() {
    timed_out_ = true;
    if (phase_ == Phase::kRequest) {
      boost::system::error_code ignored;
      Lowest(stream_).cancel(ignored);  // the read completes aborted and answers 408
    } else {
      Close();
    }
  }

  // Waits for the next request: `wait_ms` until its first byte, then request_timeout_ms for all.
  void ReadRequest(int64_t wait_ms) {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(state_->config.max_header_bytes));
    parser_->body_limit(state_->config.max_body_bytes);
    sent_continue_ = false;
    timed_out_ = false;
    if (buffer_.size() > 0) {  // pipelined: the next request is here already
      BeginRequest();
      return ReadSome();
    }
    // The parser reads on until a whole header is in, so the first bytes are read here: they
    // start the request's own deadline.
    Arm(wait_ms, Phase::kIdle);
    stream_.async_read_some(buffer_.prepare(kFirstRead),
                            [self = this->shared_from_this()](boost::system::error_code ec,
                                                              size_t bytes) {
                              if (ec || self->closed_) return self->Close();
                              self->buffer_.commit(bytes);
                              self->BeginRequest();
                              self->ReadSome();
                            });
  }

  void BeginRequest() {
    started_ = Clock::now();
    Arm(state_->config.request_timeout_ms, Phase::kRequest);
  }

  void ReadSome() {
    http::async_read_some(stream_, buffer_, *parser_,
                          [self = this->shared_from_this()](boost::system::error_code ec,
                                                            size_t bytes) {
                            self->OnRead(ec, bytes);
                          });
  }

  void OnRead(boost::system::error_code ec, size_t bytes) {
    if (closed_) return;
    if (timed_out_) {
      if (phase_ != Phase::kRequest) return Close();
      return Fail(408, Status(StatusCode::kDeadlineExceeded,
                              "the request did not arrive within frontend.request_timeout_ms (" +
                                  std::to_string(state_->config.request_timeout_ms) + " ms)"));
    }
    if (ec == http::error::header_limit) {
      return Fail(431, ResourceExhausted("the request line and headers exceed "
                                         "frontend.max_header_bytes (" +
                                         std::to_string(state_->config.max_header_bytes) +
                                         " bytes)"));
    }
    if (ec == http::error::body_limit) {
      return Fail(413, ResourceExhausted("the request body exceeds frontend.max_body_bytes (" +
                                         std::to_string(state_->config.max_body_bytes) +
                                         " bytes)"));
    }
    if (ec && ec.category() == http::make_error_code(http::error::bad_target).category() && ec != http::error::end_of_stream &&
        ec != http::error::partial_message) {
      return Fail(400, InvalidArgument("malformed HTTP request: " + ec.message()));
    }
    if (ec) return Close();  // the peer went away, or a socket or TLS error
    if (parser_->is_header_done() && !ReserveBody()) return Fail(429, BudgetExceeded());
    if (parser_->is_done()) return Handle();
    if (parser_->is_header_done() && !sent_continue_ && parser_->get()[http::field::expect] ==
                                                            "100-continue") {
      sent_continue_ = true;
      asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                        [self = this->shared_from_this()](boost::system::error_code ec, size_t) {
                          if (ec) return self->Close();
                          self->ReadSome();
                        });
      return;
    }
    ReadSome();
  }

  // Counts this request's body (its Content-Length, or max_body_bytes when chunked) against the
  // budget of all connections, once per request; false when it does not fit.
  bool ReserveBody() {
    if (body_reserved_ > 0) return true;
    return ReserveMore(std::max<uint64_t>(
        1, std::min<uint64_t>(parser_->content_length().value_or(state_->config.max_body_bytes),
                              state_->config.max_body_bytes)));
  }

  // Adds `bytes` to this request's share of the budget; false (nothing added) when they do not
  // fit.
  bool ReserveMore(uint64_t bytes) {
    const uint64_t limit = state_->config.max_inflight_body_bytes;
    uint64_t held = state_->body_bytes.load();
    do {
      if (held + bytes > limit) return false;
    } while (!state_->body_bytes.compare_exchange_weak(held, held + bytes));
    body_reserved_ += bytes;
    return true;
  }

  Status BudgetExceeded() const {
    return ResourceExhausted("the front end holds " + std::to_string(state_->body_bytes.load()) +
                             " bytes of request bodies, and this one would pass "
                             "frontend.max_inflight_body_bytes (" +
                             std::to_string(state_->config.max_inflight_body_bytes) +
                             "); retry later");
  }

  // A body with a Content-Encoding becomes its decoded bytes (content_encoding.h): bounded by
  // max_body_bytes (413), an unknown coding 415, a broken stream 400; the decoded bytes count in
  // the in-flight budget too (429). False when the request was answered here.
  bool DecodeBody() {
    auto encoding = request_.find(http::field::content_encoding);
    if (encoding == request_.end() || request_.body().empty()) return true;
    const std::string_view coding(encoding->value().data(), encoding->value().size());
    if (!NeedsContentDecoding(coding)) return true;
    std::string decoded;
    const DecodedBody result =
        DecodeContentEncoding(coding, request_.body(), state_->config.max_body_bytes, &decoded);
    Status status = result.status;
    int http_status = result.http_status;
    if (status.ok() && !ReserveMore(decoded.size())) {
      status = BudgetExceeded();
      http_status = 429;
    }
    if (!status.ok()) {
      V2HttpAnswer answer = V2ErrorAnswer(status);
      answer.http_status = http_status;
      Respond(std::move(answer));
      return false;
    }
    request_.body() = std::move(decoded);
    request_.erase(http::field::content_encoding);
    return true;
  }

  void ReleaseBody() {
    if (body_reserved_ == 0) return;
    state_->body_bytes.fetch_sub(body_reserved_);
    body_reserved_ = 0;
  }

  void OnShutdown() {
    if (closed_ || writing_) return;  // OnWritten sees state_->stopping and ends the connection
    if (phase_ == Phase::kFarm) {
      keep_alive_ = false;
      return Respond(V2ErrorAnswer(Unavailable("the supervisor is shutting down")));
    }
    Close();
  }

  void Handle() {
    Disarm();
    phase_ = Phase::kFarm;
    request_ = parser_->release();
    keep_alive_ = request_.keep_alive();
    if (!DecodeBody()) return;
    const uint64_t request = ++requests_;
    auto done = [self = this->shared_from_this(), request](V2HttpAnswer answer) {
      // Not when OnShutdown answered this request already.
      if (request != self->requests_ || self->phase_ != Phase::kFarm) return;
      self->Respond(std::move(answer));
    };
    const auto target = request_.target();
    if (IsDashboardTarget(std::string_view(target.data(), target.size()))) {
      return HandleDashboardRequest(request_, state_->config.dashboard, *channel_, std::move(done));
    }
    HandleV2Request(request_, peer_, *channel_, std::move(done), state_->config);
  }

  // An error the session itself found: answer it, then close (the stream cannot be trusted).
  void Fail(int http_status, const Status& status) {
    if (started_ == Clock::time_point{}) started_ = Clock::now();
    keep_alive_ = false;
    V2HttpAnswer answer = V2ErrorAnswer(status);
    answer.http_status = http_status;
    Respond(std::move(answer));
  }

  void Respond(V2HttpAnswer answer) {
    if (closed_) return;
    response_keep_alive_ = keep_alive_ && !state_->stopping;
    WriteResponseHead(answer, response_keep_alive_, &response_head_);
    response_body_ = std::move(answer.body);
    code_ = answer.code;
    farm_us_ = answer.farm_us;
    request_ = {};  // the body may be large; the farm is done with it
    Arm(state_->config.request_timeout_ms, Phase::kWrite);
    writing_ = true;
    const std::array<asio::const_buffer, 2> buffers = {asio::buffer(response_head_),
                                                       asio::buffer(response_body_)};
    asio::async_write(stream_, buffers,
                      [self = this->shared_from_this()](boost::system::error_code ec, size_t) {
                        self->OnWritten(ec);
                      });
  }

  void OnWritten(boost::system::error_code ec) {
    writing_ = false;
    ReleaseBody();
    Disarm();
    const int64_t total_us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_).count();
    state_->stats->Record(FrontendProtocol::kHttp, code_, total_us, farm_us_);
    started_ = {};
    if (ec) return Close();
    if (!response_keep_alive_ || state_->stopping) return Linger();
    response_body_.clear();
    response_body_.shrink_to_fit();  // as the request's: a large body is not kept while idle
    ReadRequest(state_->config.idle_timeout_ms);
  }

  // Ends a connection after its last response: closing while the peer's unread bytes wait
  // would send a reset that can destroy the response before the peer reads it, so the send side
  // shuts first and what still comes is read and dropped, for at most kLingerMs.
  void Linger() {
    boost::system::error_code ignored;
    Lowest(stream_).shutdown(tcp::socket::shutdown_send, ignored);
    Arm(std::min<int64_t>(kLingerMs, state_->config.request_timeout_ms), Phase::kWrite);
    Drain();
  }

  void Drain() {
    Lowest(stream_).async_read_some(
        asio::buffer(drain_),
        [self = this->shared_from_this()](boost::system::error_code ec, size_t) {
          if (ec || self->closed_) return self->Close();
          self->Drain();
        });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    Disarm();
    boost::system::error_code ignored;
    Lowest(stream_).shutdown(tcp::socket::shutdown_both, ignored);
    Lowest(stream_).close(ignored);
    ReleaseBody();
    Release();
  }

  // Leaves the server's count of open connections (once).
  void Release() {
    if (released_) return;
    released_ = true;
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->connections.erase(id_);
    state_->open.fetch_sub(1);
    state_->all_closed.notify_all();
  }

 public:
  uint64_t id_ = 0;

 private:
  std::shared_ptr<HttpServerState> state_;
  FarmChannel* channel_;
  Stream stream_;
  asio::steady_timer timer_;
  std::string peer_;
  beast::flat_buffer buffer_;
  std::array<char, 4096> drain_;
  std::optional<http::request_parser<RequestBody>> parser_;
  HttpRequest request_;
  std::string response_head_;  // status line and fields, reused by every response
  std::string response_body_;
  bool response_keep_alive_ = true;
  Phase phase_ = Phase::kIdle;
  uint64_t generation_ = 0;
  Clock::time_point started_{};
  StatusCode code_ = StatusCode::kOk;
  int64_t farm_us_ = 0;
  bool keep_alive_ = true;
  uint64_t requests_ = 0;  // requests handed to HandleV2Request
  bool writing_ = false;   // a response's async_write is in progress
  uint64_t body_reserved_ = 0;  // bytes of state_->body_bytes this request holds
  bool sent_continue_ = false;
  bool timed_out_ = false;
  bool closed_ = false;
  bool released_ = false;
};

template <class Session>
void Register(const std::shared_ptr<Session>& session, HttpServerState& state) {
  std::lock_guard<std::mutex> lock(state.mutex);
  session->id_ = state.next_connection++;
  state.connections.emplace(session->id_, session);
}

}  // namespace

void StartHttpSession(tcp::socket socket, std::shared_ptr<HttpServerState> state,
                      FarmChannel* channel) {
  if (state->tls) {
    auto session = std::make_shared<HttpSession<TlsStream>>(state, channel, std::move(socket),
                                                             *state->tls);
    Register(session, *state);
    session->Start();
  } else {
    auto session = std::make_shared<HttpSession<tcp::socket>>(state, channel, std::move(socket));
    Register(session, *state);
    session->Start();
  }
}

}  // namespace torchfarm
