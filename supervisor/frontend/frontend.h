// Frontend: the Open Inference Protocol front ends of one supervisor (docs/kserve-v2.md).
//
// Owns: the FarmChannels (config.frontend.threads of them, each a thread attached to the loop's
// FrontendHub), the HttpServer and the GrpcServer when their endpoints are
// configured, and the FrontendStats they share. Created and stopped by the Supervisor on its loop
// thread: Start after the loop's hub is made, Stop before the hub and the ZeroMQ context end.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/config.h"
#include "common/status.h"
#include "supervisor/frontend/farm_channel.h"
#include "supervisor/frontend/frontend_stats.h"

namespace torchfarm {

class HttpServer;
class GrpcServer;

class Frontend {
 public:
  Frontend();
  ~Frontend();  // Stop()

  // Starts the channels and the servers `config` enables; logs each bound address. Errors name
  // the endpoint. `limits` are the loop's limits.request (SetRequestLimits).
  Status Start(const FrontendConfig& config, FrontendHub& hub,
               const RequestLimits& limits = RequestLimits{});
  // Waits up to `grace` for the channels' calls the loop already answered to be passed on, then
  // stops the servers and the channels.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(0));

  // The loop's limits.request, checked by the front ends before a request is sent (any thread;
  // at start and after a reload).
  void SetRequestLimits(const RequestLimits& limits);

  int http_port() const;  // 0 when off
  int grpc_port() const;
  const FrontendStats& stats() const { return stats_; }
  // For `stats`: {"http": {"endpoint", "port", ...FrontendStats}, "grpc": {...},
  // "unmatched_replies": replies the channels could give to no call (0 unless the loop has a bug)}
  nlohmann::json ToJson() const;

 private:
  FrontendConfig config_;
  FrontendStats stats_;
  std::vector<std::unique_ptr<FarmChannel>> channels_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<GrpcServer> grpc_;
};

}  // namespace torchfarm
