// HttpSession: one HTTP/1.1 connection of the v2 front end (http_server.h), plain or TLS.
//
// Owns: the connection's socket, its read buffer and the limits on each request: header size
// (431), body size (413), the time a request may take to arrive once it began (408, then close:
// a slow-loris client cannot hold a connection), the idle time between keep-alive requests
// (close), the time a response may take to be written, and a body's Content-Encoding (gzip or
// deflate, decoded within max_body_bytes: content_encoding.h). One request at a time; pipelined
// requests wait in the buffer. What a request means is HttpV2Handler's business. Runs on the
// FarmChannel thread whose io_context the socket belongs to; Shutdown may come from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "common/config.h"
#include "supervisor/frontend/farm_channel.h"
#include "supervisor/frontend/frontend_stats.h"

namespace torchfarm {

// A connection as the server sees it: something to close.
class HttpConnection {
 public:
  virtual ~HttpConnection() = default;
  // From any thread: closes the connection on its own thread.
  virtual void Shutdown() = 0;
};

// What the server and all its connections share; connections keep it alive, so it outlives the
// server object when a connection's last handler runs late.
struct HttpServerState {
  FrontendConfig config;
  FrontendStats* stats = nullptr;
  std::shared_ptr<boost::asio::ssl::context> tls;  // null: plain HTTP

  // Open connections, for max_connections and for Stop.
  std::mutex mutex;
  std::condition_variable all_closed;
  std::unordered_map<uint64_t, std::weak_ptr<HttpConnection>> connections;
  uint64_t next_connection = 1;
  std::atomic<int> open{0};
  // Request bodies held now over all connections (frontend.max_inflight_body_bytes).
  std::atomic<uint64_t> body_bytes{0};
  std::atomic<bool> stopping{false};
};

// Takes an accepted socket (on `channel`'s io_context) and serves it until it closes. The caller
// has counted it in state->open already.
void StartHttpSession(boost::asio::ip::tcp::socket socket, std::shared_ptr<HttpServerState> state,
                      FarmChannel* channel);

}  // namespace torchfarm
