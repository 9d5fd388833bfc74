// torchfarm-bench-grpc-echo: the bare gRPC reference of docs/benchmarks.md ("Measured" of the
// Open Inference Protocol front ends). A minimal GRPCInferenceService
// (proto/triton/grpc_service.proto) on gRPC's callback API whose ModelInfer answers at once with
// its inputs as outputs (raw_input_contents -> raw_output_contents, names OUTPUT__k), so
// torchfarm-bench-grpc measures the same round trip against it and against a farm's grpc_endpoint.
// ServerLive and ServerReady answer true; nothing else is served.
//
//   torchfarm-bench-grpc-echo [--listen 127.0.0.1:0]
// prints "ready <port>" on stdout once listening and runs until SIGINT or SIGTERM.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>

#include "proto/grpc_service.grpc.pb.h"

namespace {

class EchoService final : public inference::GRPCInferenceService::CallbackService {
  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* response) override {
    response->set_live(true);
    return Finish(context);
  }
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* response) override {
    response->set_ready(true);
    return Finish(context);
  }
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override {
    if (request->raw_input_contents_size() != request->inputs_size()) {
      return Finish(context, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                          "the echo server takes raw_input_contents only"));
    }
    response->set_model_name(request->model_name());
    response->set_model_version(request->model_version());
    response->set_id(request->id());
    for (int i = 0; i < request->inputs_size(); ++i) {
      const auto& input = request->inputs(i);
      auto* output = response->add_outputs();
      output->set_name("OUTPUT__" + std::to_string(i));
      output->set_datatype(input.datatype());
      *output->mutable_shape() = input.shape();
      // A copy, as a server that hands the bytes on must make.
      response->add_raw_output_contents(request->raw_input_contents(i));
    }
    return Finish(context);
  }

  static grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                          const grpc::Status& status = grpc::Status::OK) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Bare gRPC v2 echo server (the reference for torchfarm-bench-grpc)"};
  std::string listen = "127.0.0.1:0";
  app.add_option("--listen", listen, "HOST:PORT to listen on (port 0: any free port)");
  CLI11_PARSE(app, argc, argv);

  // SIGINT/SIGTERM are taken by sigwait below, never by a handler; blocked before gRPC starts
  // its threads so they inherit the mask.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  EchoService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(-1);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::cerr << "error: cannot listen on '" << listen << "' (expected a free HOST:PORT)\n";
    return 1;
  }
  std::cout << "ready " << port << std::endl;
  int signal_number = 0;
  sigwait(&stop, &signal_number);
  server->Shutdown();
  return 0;
}
