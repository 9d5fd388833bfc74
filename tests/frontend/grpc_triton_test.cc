// GrpcServer as Triton's clients meet it (issue 30): ModelReady false for an unknown model,
// priority and timeout as uint64_param, ModelConfig and ModelStatistics, ModelStreamInfer; against
// the fake loop of grpc_server_fixture.h.
#include <map>

#include "supervisor/frontend/grpc_stream.h"
#include "tests/frontend/grpc_server_fixture.h"

namespace torchfarm {
namespace {

using nlohmann::json;

// Its own suite name: GrpcServerTest of grpc_server_test.cc is another class (another TU's
// anonymous namespace), which GoogleTest refuses in one suite.
class GrpcTritonTest : public GrpcServerTest {};

// Triton's semantics (issue 30 item 4): an unknown model or version is not ready, not an error,
// so tritonclient's is_model_ready() returns False instead of raising.
TEST_F(GrpcTritonTest, ModelReadyOfAnUnknownModelOrVersionIsFalse) {
  grpc::ClientContext context;
  inference::ModelReadyRequest request;
  request.set_name("nope");
  inference::ModelReadyResponse response;
  response.set_ready(true);
  grpc::Status status = stub_->ModelReady(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(response.ready());

  grpc::ClientContext version_context;
  request.set_name("identity");
  request.set_version("9");
  response.set_ready(true);
  status = stub_->ModelReady(&version_context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(response.ready());

  grpc::ClientContext metadata_context;  // metadata still says why
  inference::ModelMetadataRequest metadata_request;
  metadata_request.set_name("nope");
  inference::ModelMetadataResponse metadata;
  status = stub_->ModelMetadata(&metadata_context, metadata_request, &metadata);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("model 'nope' is not served here (served: identity"),
            std::string::npos)
      << status.error_message();
}

// Triton's ModelConfig and ModelStatistics (issue 30 item 6), advertised in ServerMetadata.
TEST_F(GrpcTritonTest, ModelConfigAndStatisticsAreTritonsMessages) {
  grpc::ClientContext server_context;
  inference::ServerMetadataResponse server;
  ASSERT_TRUE(stub_->ServerMetadata(&server_context, {}, &server).ok());
  EXPECT_EQ(std::vector<std::string>(server.extensions().begin(), server.extensions().end()),
            (std::vector<std::string>{"model_configuration", "statistics", "model_repository",
                                      "classification", "logging"}));

  grpc::ClientContext config_context;
  inference::ModelConfigRequest config_request;
  config_request.set_name("identity");
  inference::ModelConfigResponse config;
  grpc::Status status = stub_->ModelConfig(&config_context, config_request, &config);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(config.config().name(), "identity");
  EXPECT_EQ(config.config().platform(), "pytorch_libtorch");
  ASSERT_EQ(config.config().input_size(), 1);
  EXPECT_EQ(config.config().input(0).data_type(), inference::TYPE_FP32);
  EXPECT_EQ(std::vector<int64_t>(config.config().input(0).dims().begin(),
                                 config.config().input(0).dims().end()),
            (std::vector<int64_t>{4}));  // [-1, 4]: the batch dimension left out

  grpc::ClientContext missing_context;
  config_request.set_name("nope");
  status = stub_->ModelConfig(&missing_context, config_request, &config);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("model 'nope' is not served here"), std::string::npos);

  grpc::ClientContext stats_context;
  inference::ModelStatisticsRequest stats_request;  // every model
  inference::ModelStatisticsResponse stats;
  status = stub_->ModelStatistics(&stats_context, stats_request, &stats);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(stats.model_stats_size(), 2);
  EXPECT_EQ(stats.model_stats(0).name(), "identity");
  EXPECT_EQ(loop_->last_header().value("statistics", false), true);
}

// tritonclient sends "priority" as uint64_param (issue 30 item 1); Triton takes both kinds.
TEST_F(GrpcTritonTest, PriorityAndTimeoutComeAsUint64ParamToo) {
  inference::ModelInferRequest request = RawRequest("identity", {1});
  (*request.mutable_parameters())["priority"].set_uint64_param(2);
  (*request.mutable_parameters())["timeout"].set_uint64_param(7'000);
  inference::ModelInferResponse response;
  grpc::Status status = Infer(request, &response, 60'000);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(loop_->last_header().value("priority", 0), 2);
  EXPECT_EQ(loop_->last_header().value("timeout_ms", 0), 7);
  // Past the wire's range a Triton priority means "the default level", which 0 says.
  (*request.mutable_parameters())["priority"].set_uint64_param(UINT64_MAX);
  status = Infer(request, &response, 60'000);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(loop_->last_header().contains("priority"));
  // Wrong kinds are still refused, naming what came; then a good call succeeds.
  (*request.mutable_parameters())["priority"].set_bool_param(true);
  status = Infer(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "parameters.priority: expected a non-negative int64_param or uint64_param, got "
            "bool_param");
  (*request.mutable_parameters())["priority"].set_int64_param(-1);
  status = Infer(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("got int64_param -1"), std::string::npos);
  (*request.mutable_parameters())["priority"].Clear();  // no value at all
  status = Infer(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("got no value of those kinds"), std::string::npos);
  request.mutable_parameters()->erase("priority");
  EXPECT_TRUE(Infer(request, &response).ok());
}

// parameters.client_weight (issue 32): double_param, int64_param or uint64_param in 0.01..100,
// passed on as the farm header's client_weight; anything else is refused naming what came.
TEST_F(GrpcTritonTest, ClientWeightComesAsADoubleOrIntegerParameter) {
  inference::ModelInferRequest request = RawRequest("identity", {1});
  inference::ModelInferResponse response;
  (*request.mutable_parameters())["client_weight"].set_double_param(0.5);
  grpc::Status status = Infer(request, &response, 60'000);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(loop_->last_header().value("client_weight", 0.0), 0.5);
  (*request.mutable_parameters())["client_weight"].set_int64_param(100);
  ASSERT_TRUE(Infer(request, &response, 60'000).ok());
  EXPECT_EQ(loop_->last_header().value("client_weight", 0.0), 100.0);
  (*request.mutable_parameters())["client_weight"].set_double_param(100.5);
  status = Infer(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "parameters.client_weight: expected a number in 0.01..100 (a client weight), got "
            "number 100.5");
  (*request.mutable_parameters())["client_weight"].set_bool_param(true);
  status = Infer(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "parameters.client_weight: expected a double_param, int64_param or uint64_param in "
            "0.01..100, got bool_param");
  request.mutable_parameters()->erase("client_weight");
  EXPECT_TRUE(Infer(request, &response).ok());
}

// ModelStreamInfer (issue 30): one response per request, errors in error_message with the
// stream going on; past kStreamWindow unanswered requests the server stops reading the stream.
TEST_F(GrpcTritonTest, StreamAnswersEachRequestAndStopsReadingPastItsWindow) {
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  inference::ModelInferRequest good = RawRequest("identity", {1, 2});
  good.set_id("a");
  inference::ModelInferRequest bad = good;
  bad.set_id("b");
  bad.mutable_inputs(0)->set_datatype("FP33");
  inference::ModelInferRequest failing = RawRequest("fail_INTERNAL", {1, 2});
  failing.set_id("c");
  for (const auto* request : {&good, &bad, &failing}) ASSERT_TRUE(stream->Write(*request));
  std::map<std::string, inference::ModelStreamInferResponse> got;
  for (int i = 0; i < 3; ++i) {
    inference::ModelStreamInferResponse response;
    ASSERT_TRUE(stream->Read(&response));
    got[response.infer_response().id()] = response;
  }
  EXPECT_EQ(got["a"].error_message(), "");
  ASSERT_EQ(got["a"].infer_response().raw_output_contents_size(), 1);
  EXPECT_EQ(got["a"].infer_response().raw_output_contents(0), good.raw_input_contents(0));
  EXPECT_NE(got["b"].error_message().find("FP33"), std::string::npos);
  EXPECT_EQ(got["c"].error_message(), "fake INTERNAL");

  // The farm never answers "silent": the stream holds kStreamWindow of them and reads no more.
  const inference::ModelInferRequest silent = RawRequest("silent", {1, 2});
  for (int i = 0; i < kStreamWindow + 50; ++i) ASSERT_TRUE(stream->Write(silent));
  auto pending = [&] { return channels_[0]->pending() + channels_[1]->pending(); };
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (pending() < static_cast<size_t>(kStreamWindow) &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(pending(), static_cast<size_t>(kStreamWindow));
  context.TryCancel();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The server goes on: a unary call, and a fresh stream, are answered.
  inference::ModelInferResponse response;
  EXPECT_TRUE(Infer(good, &response).ok());
  grpc::ClientContext again;
  auto next = stub_->ModelStreamInfer(&again);
  ASSERT_TRUE(next->Write(good));
  ASSERT_TRUE(next->WritesDone());
  inference::ModelStreamInferResponse last;
  ASSERT_TRUE(next->Read(&last));
  EXPECT_EQ(last.error_message(), "");
  EXPECT_FALSE(next->Read(&last));
  EXPECT_TRUE(next->Finish().ok());
}

}  // namespace
}  // namespace torchfarm
