// GrpcServer in a build without gRPC (-DTORCHFARM_GRPC=OFF, e.g. the sanitizer tree of
// `make test-asan`): a grpc_endpoint is refused at start, naming the build option.
#include "supervisor/frontend/grpc_server.h"

namespace torchfarm {

class GrpcServer::Impl {};

Status GrpcServer::Start(const FrontendConfig& config, std::vector<FarmChannel*>, FrontendStats*,
                         std::unique_ptr<GrpcServer>*) {
  return Unavailable("grpc_endpoint \"" + config.grpc_endpoint +
                     "\": this torchfarm was built without gRPC (cmake -DTORCHFARM_GRPC=ON)");
}

GrpcServer::GrpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GrpcServer::~GrpcServer() = default;
void GrpcServer::Stop() {}
int GrpcServer::port() const { return 0; }

}  // namespace torchfarm
