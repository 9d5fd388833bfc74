// frontend.client_id_header on the gRPC front end, against the fake loop of grpc_server_fixture.h:
// the metadata key names a unary call's client and a stream's, in the tag the loop reads
// (frontend_tag.h); a hostile value or two values are INVALID_ARGUMENT naming the key and never
// reach the farm, and the next call (or the stream's next request) is served.
#include <string>
#include <vector>

#include "supervisor/frontend/grpc_stream.h"
#include "tests/frontend/grpc_server_fixture.h"

namespace torchfarm {
namespace {

// Its own suite name (see grpc_triton_test.cc), with the key set as a config file would give it
// (lowercase).
class GrpcClientIdTest : public GrpcServerTest {
 protected:
  void Configure(FrontendConfig& config) override { config.client_id_header = "x-tenant"; }

  grpc::Status InferAs(const std::vector<std::string>& ids, inference::ModelInferResponse* out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    for (const std::string& id : ids) context.AddMetadata("x-tenant", id);
    return stub_->ModelInfer(&context, RawRequest("identity", {1.5f, 2.5f}), out);
  }
};

constexpr const char* kExpected =
    "x-tenant: expected 1..255 visible ASCII characters naming the client "
    "(frontend.client_id_header), got ";

TEST_F(GrpcClientIdTest, MetadataNamesAUnaryCallsClientAndHostileValuesAreRefused) {
  inference::ModelInferResponse response;
  grpc::Status status = InferAs({"tenant-gold"}, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(loop_->last_tag(), "grpc=tenant-gold");
  ASSERT_EQ(response.raw_output_contents_size(), 1);

  const struct {
    std::vector<std::string> ids;
    std::string error;
  } hostile[] = {
      {{std::string(300, 'g')}, std::string(kExpected) + "300 bytes"},
      {{std::string(256, 'g')}, std::string(kExpected) + "256 bytes"},
      {{""}, std::string(kExpected) + "an empty value"},
      {{"tenant gold"}, std::string(kExpected) + "11 bytes with byte 0x20 at offset 6"},
      {{"gold", "gold"},
       "x-tenant: expected one value naming the client (frontend.client_id_header), got 2 "
       "values"},
  };
  for (const auto& bad : hostile) {
    const std::string before = loop_->last_tag();
    status = InferAs(bad.ids, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad.error;
    EXPECT_EQ(status.error_message(), bad.error);
    EXPECT_EQ(loop_->last_tag(), before) << "a refused call never reaches the farm";
    status = InferAs({"tenant-silver"}, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(loop_->last_tag(), "grpc=tenant-silver");
  }
  status = InferAs({std::string(255, 'g')}, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(loop_->last_tag(), "grpc=" + std::string(255, 'g'));
  // Without the metadata: the peer's tag, as with the key off.
  status = InferAs({}, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(loop_->last_tag().rfind("grpc ipv4:127.0.0.1:", 0), 0u) << loop_->last_tag();
  // Health calls ignore it.
  grpc::ClientContext live_context;
  live_context.AddMetadata("x-tenant", "");
  inference::ServerLiveResponse live;
  EXPECT_TRUE(stub_->ServerLive(&live_context, {}, &live).ok());
}

// A stream's metadata names every request on it; a stream whose metadata cannot name a client
// answers each request with the refusal and goes on to end OK.
TEST_F(GrpcClientIdTest, MetadataNamesAStreamsRequestsOrRefusesEachOfThem) {
  inference::ModelInferRequest request = RawRequest("identity", {1, 2});
  {
    grpc::ClientContext context;
    context.AddMetadata("x-tenant", "tenant-gold");
    auto stream = stub_->ModelStreamInfer(&context);
    ASSERT_TRUE(stream->Write(request));
    inference::ModelStreamInferResponse response;
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_EQ(response.error_message(), "");
    EXPECT_EQ(loop_->last_tag(), "grpc=tenant-gold");
    ASSERT_TRUE(stream->WritesDone());
    EXPECT_FALSE(stream->Read(&response));
    EXPECT_TRUE(stream->Finish().ok());
  }
  const std::string before = loop_->last_tag();
  grpc::ClientContext context;
  context.AddMetadata("x-tenant", std::string(300, 'g'));
  auto stream = stub_->ModelStreamInfer(&context);
  for (int i = 0; i < 2; ++i) {
    request.set_id("r" + std::to_string(i));
    ASSERT_TRUE(stream->Write(request));
    inference::ModelStreamInferResponse response;
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_EQ(response.error_message(), std::string(kExpected) + "300 bytes");
    EXPECT_EQ(response.infer_response().id(), "r" + std::to_string(i));
  }
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(loop_->last_tag(), before) << "no refused request reached the farm";
}

}  // namespace
}  // namespace torchfarm
