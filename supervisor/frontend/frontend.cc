#include "supervisor/frontend/frontend.h"

#include <thread>

#include "common/log.h"
#include "supervisor/frontend/grpc_server.h"
#include "supervisor/frontend/http_server.h"

namespace torchfarm {

Frontend::Frontend() = default;

Frontend::~Frontend() { Stop(); }

Status Frontend::Start(const FrontendConfig& config, FrontendHub& hub,
                       const RequestLimits& limits) {
  config_ = config;
  if (!config.enabled()) return Status::Ok();
  std::vector<FarmChannel*> channels;
  for (int i = 0; i < config.threads; ++i) {
    channels_.push_back(std::make_unique<FarmChannel>(hub));
    channels_.back()->set_request_limits(limits);
    if (Status s = channels_.back()->Start(); !s.ok()) return s;
    channels.push_back(channels_.back().get());
  }
  if (!config.http_endpoint.empty()) {
    if (Status s = HttpServer::Start(config, channels, &stats_, &http_); !s.ok()) return s;
    TF_LOG(kInfo) << "serving the Open Inference Protocol over HTTP"
                  << Kv("endpoint", config.http_endpoint) << Kv("port", http_->port())
                  << Kv("tls", config.tls.enabled()) << Kv("threads", config.threads);
  }
  if (!config.grpc_endpoint.empty()) {
    if (Status s = GrpcServer::Start(config, channels, &stats_, &grpc_); !s.ok()) return s;
    TF_LOG(kInfo) << "serving the Open Inference Protocol over gRPC"
                  << Kv("endpoint", config.grpc_endpoint) << Kv("port", grpc_->port())
                  << Kv("tls", config.tls.enabled());
  }
  return Status::Ok();
}

void Frontend::Stop(std::chrono::milliseconds grace) {
  const auto until = std::chrono::steady_clock::now() + grace;
  auto pending = [&] {
    size_t n = 0;
    for (const auto& channel : channels_) n += channel->pending();
    return n;
  };
  while (pending() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Servers first: their connections and calls live on the channels' threads.
  if (http_) http_->Stop();
  if (grpc_) grpc_->Stop();
  for (auto& channel : channels_) channel->Stop();
  http_.reset();
  grpc_.reset();
  channels_.clear();
}

void Frontend::SetRequestLimits(const RequestLimits& limits) {
  for (auto& channel : channels_) channel->set_request_limits(limits);
}

int Frontend::http_port() const { return http_ ? http_->port() : 0; }
int Frontend::grpc_port() const { return grpc_ ? grpc_->port() : 0; }

nlohmann::json Frontend::ToJson() const {
  nlohmann::json out = stats_.ToJson();
  out["http"]["endpoint"] = config_.http_endpoint;
  out["http"]["port"] = http_port();
  out["grpc"]["endpoint"] = config_.grpc_endpoint;
  out["grpc"]["port"] = grpc_port();
  out["threads"] = config_.threads;
  uint64_t unmatched = 0;
  for (const auto& channel : channels_) unmatched += channel->unmatched_replies();
  out["unmatched_replies"] = unmatched;
  return out;
}

}  // namespace torchfarm
