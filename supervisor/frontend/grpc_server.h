// GrpcServer: the Open Inference Protocol (KServe v2) over gRPC: the GRPCInferenceService of
// Triton's proto/triton/grpc_service.proto (a superset of KServe's proto/grpc_predict_v2.proto;
// both checked in with their licence headers).
//
// Owns: the grpc::Server (its own completion threads, bounded by a ResourceQuota), the service's
// handlers (ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelConfig,
// ModelStatistics, ModelInfer, SystemSharedMemory*; the other RPCs answer UNIMPLEMENTED) and the
// mapping of farm codes to gRPC status codes (INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED,
// DEADLINE_EXCEEDED, UNAVAILABLE, INTERNAL). Each call is handed to a FarmChannel's thread
// (FarmChannel::Post) and answered from there; nothing runs on the supervisor's loop. Uses the
// callback API so no thread blocks per call.
#pragma once

#include <memory>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "supervisor/frontend/farm_channel.h"
#include "supervisor/frontend/frontend_stats.h"

namespace torchfarm {

class GrpcServer {
 public:
  // Binds config.grpc_endpoint (port 0: any free port), with TLS when config.tls is set.
  // `channels` (at least one, started) and `stats` outlive the server. Errors name the endpoint.
  static Status Start(const FrontendConfig& config, std::vector<FarmChannel*> channels,
                      FrontendStats* stats, std::unique_ptr<GrpcServer>* out);
  ~GrpcServer();  // Stop()
  // Shuts the server down (calls in progress are cancelled); idempotent; call before the
  // channels stop.
  void Stop();
  int port() const;

  class Impl;

 private:
  explicit GrpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace torchfarm
