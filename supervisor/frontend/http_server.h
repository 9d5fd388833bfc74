// HttpServer: the Open Inference Protocol (KServe v2) over HTTP/1.1, on Boost.Beast.
//
// Owns: the listening socket and every connection: keep-alive, request limits (header and body
// size, the time a request may take to arrive, idle keep-alive time, open connections), optional
// TLS, routing of the /v2 paths (docs/kserve-v2.md) and error responses {"error": "..."} with the
// HTTP status of the farm's code. Connections are spread over the FarmChannels' threads (each
// connection lives on one channel's io_context and sends its jobs through that channel); nothing
// runs on the supervisor's loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "supervisor/frontend/farm_channel.h"
#include "supervisor/frontend/frontend_stats.h"

namespace torchfarm {

class HttpServer {
 public:
  // Binds config.http_endpoint (port 0: any free port) and starts accepting on channels[0]'s
  // thread. `channels` (at least one, started) and `stats` outlive the server. Errors name the
  // endpoint (or the TLS file) and the OS error.
  static Status Start(const FrontendConfig& config, std::vector<FarmChannel*> channels,
                      FrontendStats* stats, std::unique_ptr<HttpServer>* out);
  ~HttpServer();  // Stop()
  // Stops accepting and ends every connection: a response being written is finished first, a
  // request still waiting for the farm is answered 503, idle connections close at once; waits a
  // bounded time for them. Idempotent; call before the channels stop.
  void Stop();
  int port() const;  // the bound port

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace torchfarm
