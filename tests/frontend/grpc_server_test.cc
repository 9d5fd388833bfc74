// GrpcServer over a real gRPC channel, against a fake job loop: a FrontendHub whose requests a
// thread of the test answers like the supervisor's loop (farm_channel.h). Every RPC, raw and typed
// contents, output selection, and each error class with its gRPC code. Triton's additions are in
// grpc_triton_test.cc.
#include "tests/frontend/grpc_server_fixture.h"

namespace torchfarm {
namespace {

using nlohmann::json;

TEST_F(GrpcServerTest, HealthCallsAskTheLoop) {
  grpc::ClientContext live_context;
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub_->ServerLive(&live_context, {}, &live).ok());
  EXPECT_TRUE(live.live());
  EXPECT_EQ(loop_->last_tag(), kMetaTag);

  grpc::ClientContext ready_context;
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(stub_->ServerReady(&ready_context, {}, &ready).ok());
  EXPECT_FALSE(ready.ready());  // the fake farm has a cold model

  for (const auto& [name, expected] : {std::pair{"identity", true}, std::pair{"cold", false}}) {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name(name);
    inference::ModelReadyResponse response;
    ASSERT_TRUE(stub_->ModelReady(&context, request, &response).ok()) << name;
    EXPECT_EQ(response.ready(), expected) << name;
    EXPECT_EQ(loop_->last_model(), name);
  }
}

TEST_F(GrpcServerTest, Metadata) {
  grpc::ClientContext server_context;
  inference::ServerMetadataResponse server;
  ASSERT_TRUE(stub_->ServerMetadata(&server_context, {}, &server).ok());
  EXPECT_EQ(server.name(), "torchfarm");
  EXPECT_FALSE(server.version().empty());

  grpc::ClientContext model_context;
  inference::ModelMetadataRequest request;
  request.set_name("identity");
  request.set_version("1");
  inference::ModelMetadataResponse model;
  grpc::Status status = stub_->ModelMetadata(&model_context, request, &model);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(model.name(), "identity");
  ASSERT_EQ(model.versions_size(), 1);
  EXPECT_EQ(model.versions(0), "1");
  EXPECT_EQ(model.platform(), "pytorch_libtorch");
  ASSERT_EQ(model.inputs_size(), 1);
  EXPECT_EQ(model.inputs(0).name(), "INPUT__0");
  EXPECT_EQ(model.inputs(0).datatype(), "FP32");
  EXPECT_EQ(std::vector<int64_t>(model.inputs(0).shape().begin(), model.inputs(0).shape().end()),
            (std::vector<int64_t>{-1, 4}));
  ASSERT_EQ(model.outputs_size(), 1);
  EXPECT_EQ(model.outputs(0).name(), "OUTPUT__0");
}

TEST_F(GrpcServerTest, InferRawContentsRoundTrip) {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f};
  inference::ModelInferResponse response;
  grpc::Status status = Infer(RawRequest("identity", values), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.model_name(), "identity");
  EXPECT_EQ(response.id(), "req-7");
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "OUTPUT__0");
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  EXPECT_EQ(
      std::vector<int64_t>(response.outputs(0).shape().begin(), response.outputs(0).shape().end()),
      (std::vector<int64_t>{1, 4}));
  EXPECT_FALSE(response.outputs(0).has_contents());
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  ASSERT_EQ(response.raw_output_contents(0).size(), values.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(response.raw_output_contents(0).data(), values.data(),
                        values.size() * sizeof(float)),
            0);
  // The farm saw a grpc-tagged job with the client's peer, and the input's dtype and shape.
  EXPECT_EQ(loop_->last_tag().rfind("grpc ", 0), 0u) << loop_->last_tag();
  const json header = loop_->last_header();
  EXPECT_EQ(header["model"], "identity");
  EXPECT_EQ(header["inputs"][0]["dtype"], "float32");
  // The call's 5 s deadline became the farm's timeout (gRPC rounds the deadline it sends up).
  EXPECT_GT(header.value("timeout_ms", 0), 4000);
  EXPECT_LE(header.value("timeout_ms", 0), 5100);
  EXPECT_EQ(stats_.ToJson()["grpc"]["requests"], 1);
}

TEST_F(GrpcServerTest, TimeoutAndPriorityParametersReachTheFarm) {
  inference::ModelInferRequest request = RawRequest("identity", {1});
  (*request.mutable_parameters())["timeout"].set_int64_param(50'001);  // µs, as Triton's
  (*request.mutable_parameters())["priority"].set_int64_param(3);
  inference::ModelInferResponse response;
  grpc::Status status = Infer(request, &response, 60'000);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(loop_->last_header().value("timeout_ms", 0), 51);  // rounded up
  EXPECT_EQ(loop_->last_header().value("priority", 0), 3);
}

// model_version travels to the farm as the header's "version" (the farm answers NOT_FOUND for a
// version it does not serve); none: the farm's default.
TEST_F(GrpcServerTest, InferPassesTheVersionToTheFarm) {
  inference::ModelInferRequest request = RawRequest("identity", {1});
  request.set_model_version("7");
  inference::ModelInferResponse response;
  grpc::Status status = Infer(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  EXPECT_EQ(status.error_message(), "model 'identity' has no version '7' (loaded versions: 1)");
  EXPECT_EQ(loop_->last_header().value("version", ""), "7");
  request.set_model_version("1");
  ASSERT_TRUE(Infer(request, &response).ok());
  EXPECT_EQ(loop_->last_header().value("version", ""), "1");
  EXPECT_EQ(response.model_version(), "1");
  request.clear_model_version();
  ASSERT_TRUE(Infer(request, &response).ok());
  EXPECT_FALSE(loop_->last_header().contains("version"));
}

// The largest int64 µs used to overflow the rounding up (signed overflow), giving no timeout.
TEST_F(GrpcServerTest, TheLargestTimeoutParameterStaysATimeout) {
  inference::ModelInferRequest request = RawRequest("identity", {1});
  (*request.mutable_parameters())["timeout"].set_int64_param(INT64_MAX);
  inference::ModelInferResponse response;
  grpc::Status status = Infer(request, &response, 60'000);
  ASSERT_TRUE(status.ok()) << status.error_message();
  // The gRPC deadline (60 s) is the nearer one now.
  const int64_t timeout_ms = loop_->last_header().value("timeout_ms", int64_t{0});
  EXPECT_GT(timeout_ms, 50'000);
  EXPECT_LE(timeout_ms, 61'000);  // gRPC may round the deadline it sends up
}

TEST_F(GrpcServerTest, InferTypedContentsBecomeLittleEndianBytes) {
  inference::ModelInferRequest request;
  request.set_model_name("identity");
  auto add = [&](const char* name, const char* datatype) {
    auto* input = request.add_inputs();
    input->set_name(name);
    input->set_datatype(datatype);
    input->add_shape(3);
    return input->mutable_contents();
  };
  auto* f32s = add("f32", "FP32");
  for (float v : {1.0f, 2.5f, -3.0f}) f32s->add_fp32_contents(v);
  auto* i64 = add("i64", "INT64");
  for (int64_t v : {int64_t{1} << 40, int64_t{-5}, int64_t{7}}) i64->add_int64_contents(v);
  auto* i8 = add("i8", "INT8");
  for (int v : {-128, 0, 127}) i8->add_int_contents(v);
  auto* u8 = add("u8", "UINT8");
  for (unsigned v : {0u, 200u, 255u}) u8->add_uint_contents(v);
  auto* b = add("b", "BOOL");
  for (bool v : {true, false, true}) b->add_bool_contents(v);
  auto* f64 = add("f64", "FP64");
  for (double v : {0.1, -0.2, 1e300}) f64->add_fp64_contents(v);

  inference::ModelInferResponse response;
  grpc::Status status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.raw_output_contents_size(), 6);
  const float f32[] = {1.0f, 2.5f, -3.0f};
  const int64_t s64[] = {int64_t{1} << 40, -5, 7};
  const int8_t s8[] = {-128, 0, 127};
  const uint8_t u8s[] = {0, 200, 255};
  const uint8_t bools[] = {1, 0, 1};
  const double f64s[] = {0.1, -0.2, 1e300};
  auto bytes = [](const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); };
  EXPECT_EQ(response.raw_output_contents(0), bytes(f32, sizeof f32));
  EXPECT_EQ(response.raw_output_contents(1), bytes(s64, sizeof s64));
  EXPECT_EQ(response.raw_output_contents(2), bytes(s8, sizeof s8));
  EXPECT_EQ(response.raw_output_contents(3), bytes(u8s, sizeof u8s));
  EXPECT_EQ(response.raw_output_contents(4), bytes(bools, sizeof bools));
  EXPECT_EQ(response.raw_output_contents(5), bytes(f64s, sizeof f64s));
  EXPECT_EQ(response.outputs(3).datatype(), "UINT8");
  EXPECT_EQ(response.outputs(4).datatype(), "BOOL");
}

TEST_F(GrpcServerTest, RequestedOutputsSelectAndOrder) {
  inference::ModelInferRequest request = RawRequest("identity", {1, 2});
  const float second[] = {3, 4, 5};
  auto* input = request.add_inputs();
  input->set_name("INPUT__1");
  input->set_datatype("FP32");
  input->add_shape(3);
  request.add_raw_input_contents(reinterpret_cast<const char*>(second), sizeof second);
  request.add_outputs()->set_name("OUTPUT__1");
  inference::ModelInferResponse response;
  grpc::Status status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "OUTPUT__1");
  EXPECT_EQ(response.raw_output_contents(0).size(), sizeof second);

  request.mutable_outputs(0)->set_name("OUTPUT__9");
  status = Infer(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(GrpcServerTest, MalformedRequestsAreInvalidArgumentAndNeverReachTheFarm) {
  struct Case {
    const char* what;
    std::function<void(inference::ModelInferRequest*)> spoil;
    const char* message_part;
  };
  const std::vector<Case> cases = {
      {"unknown datatype", [](auto* r) { r->mutable_inputs(0)->set_datatype("FP33"); }, "FP33"},
      {"BYTES", [](auto* r) { r->mutable_inputs(0)->set_datatype("BYTES"); }, "BYTES"},
      {"raw size", [](auto* r) { r->mutable_raw_input_contents(0)->resize(3); }, "inputs[0]"},
      {"raw count", [](auto* r) { r->add_raw_input_contents("x"); }, "raw_input_contents"},
      {"raw and contents",
       [](auto* r) { r->mutable_inputs(0)->mutable_contents()->add_fp32_contents(1); },
       "raw_input_contents"},
      {"typed count",
       [](auto* r) {
         r->clear_raw_input_contents();
         r->mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
       },
       "needs 2 values in contents.fp32_contents, got 1"},
      {"typed wrong field",
       [](auto* r) {
         r->clear_raw_input_contents();
         auto* c = r->mutable_inputs(0)->mutable_contents();
         c->add_int64_contents(1);
         c->add_int64_contents(2);
       },
       "fp32_contents"},
      {"typed FP16",
       [](auto* r) {
         r->clear_raw_input_contents();
         r->mutable_inputs(0)->set_datatype("FP16");
       },
       "raw_input_contents"},
      {"INT8 out of range",
       [](auto* r) {
         r->clear_raw_input_contents();
         r->mutable_inputs(0)->set_datatype("INT8");
         r->mutable_inputs(0)->mutable_contents()->add_int_contents(1);
         r->mutable_inputs(0)->mutable_contents()->add_int_contents(300);
       },
       "300"},
      {"shared memory without its byte size",
       [](auto* r) {
         (*r->mutable_inputs(0)->mutable_parameters())["shared_memory_region"].set_string_param(
             "region0");
       },
       ".parameters.shared_memory_byte_size: expected an integer 1..2^62 with "
       "shared_memory_region, got nothing"},
      {"shared memory on a farm without frontend.system_shared_memory",
       [](auto* r) {
         auto& params = *r->mutable_inputs(0)->mutable_parameters();
         params["shared_memory_region"].set_string_param("region0");
         params["shared_memory_byte_size"].set_int64_param(8);
         r->clear_raw_input_contents();
       },
       "parameters.shared_memory_region: system shared memory is off on this farm: set "
       "\"frontend\": {\"system_shared_memory\": true}"},
      {"shared memory byte size of the wrong kind",
       [](auto* r) {
         auto& params = *r->mutable_inputs(0)->mutable_parameters();
         params["shared_memory_region"].set_string_param("region0");
         params["shared_memory_byte_size"].set_string_param("8");
       },
       ".parameters.shared_memory_byte_size: expected an integer 1..2^62, got string \"8\""},
      {"classification as a string",
       [](auto* r) {
         (*r->add_outputs()->mutable_parameters())["classification"].set_string_param("3");
       },
       "outputs[0].parameters.classification: expected an int64_param class count"},
      {"classification 0",
       [](auto* r) {
         (*r->add_outputs()->mutable_parameters())["classification"].set_int64_param(0);
       },
       "outputs[0].parameters.classification"},
      // Each repeat used to copy the output's bytes once more: a few MB of repeated names made
      // the supervisor allocate without bound.
      {"output twice",
       [](auto* r) {
         r->add_outputs()->set_name("OUTPUT__0");
         r->add_outputs()->set_name("OUTPUT__0");
       },
       "outputs[1].name: 'OUTPUT__0' is requested twice"},
      {"timeout type",
       [](auto* r) { (*r->mutable_parameters())["timeout"].set_string_param("soon"); }, "timeout"},
  };
  for (const Case& c : cases) {
    inference::ModelInferRequest request = RawRequest("silent", {1, 2});
    c.spoil(&request);
    inference::ModelInferResponse response;
    grpc::Status status = Infer(request, &response, 2000);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what;
    EXPECT_NE(status.error_message().find(c.message_part), std::string::npos)
        << c.what << ": " << status.error_message();
  }
}

TEST_F(GrpcServerTest, FarmCodesBecomeGrpcCodes) {
  const std::vector<std::pair<std::string, grpc::StatusCode>> cases = {
      {"INVALID_ARGUMENT", grpc::StatusCode::INVALID_ARGUMENT},
      {"NOT_FOUND", grpc::StatusCode::NOT_FOUND},
      {"RESOURCE_EXHAUSTED", grpc::StatusCode::RESOURCE_EXHAUSTED},
      {"DEADLINE_EXCEEDED", grpc::StatusCode::DEADLINE_EXCEEDED},
      {"UNAVAILABLE", grpc::StatusCode::UNAVAILABLE},
      {"INTERNAL", grpc::StatusCode::INTERNAL},
  };
  for (const auto& [farm_code, grpc_code] : cases) {
    inference::ModelInferResponse response;
    grpc::Status status = Infer(RawRequest("fail_" + farm_code, {1}), &response);
    EXPECT_EQ(status.error_code(), grpc_code) << farm_code;
    EXPECT_EQ(status.error_message(), "fake " + farm_code);
  }
  const json stats = stats_.ToJson()["grpc"];
  EXPECT_EQ(stats["requests"], cases.size());
  EXPECT_EQ(stats["errors"], cases.size());
}

TEST_F(GrpcServerTest, OversizedMessageIsRefusedByGrpc) {
  inference::ModelInferResponse response;
  grpc::Status status = Infer(RawRequest("identity", std::vector<float>(1 << 19)), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(GrpcServerTest, ClientDeadlineWhileTheFarmHoldsTheCall) {
  inference::ModelInferResponse response;
  grpc::Status status = Infer(RawRequest("silent", {1}), &response, 200);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST_F(GrpcServerTest, StopFinishesCallsInFlightUnavailable) {
  std::atomic<int> code{-1};
  std::thread client([&] {
    inference::ModelInferResponse response;
    code = Infer(RawRequest("silent", {1}), &response, 10000).error_code();
  });
  // Wait until the farm holds the call, then stop the server under it.
  for (int i = 0; i < 500 && loop_->last_model() != "silent"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto start = std::chrono::steady_clock::now();
  server_->Stop();
  client.join();
  EXPECT_EQ(code, static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(GrpcServerTest, ConcurrentCallsAllComplete) {
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        std::vector<float> values = {static_cast<float>(t), static_cast<float>(i)};
        inference::ModelInferResponse response;
        if (Infer(RawRequest("identity", values), &response).ok() &&
            std::memcmp(response.raw_output_contents(0).data(), values.data(), 8) == 0) {
          ++ok;
        }
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(ok, 200);
}

TEST(GrpcServerStartTest, AnEndpointInUseNamesIt) {
  FrontendHub hub;
  FarmChannel channel(hub);
  ASSERT_TRUE(channel.Start().ok());
  FrontendStats stats;
  FrontendConfig config;
  config.grpc_endpoint = "127.0.0.1:0";
  std::unique_ptr<GrpcServer> first;
  ASSERT_TRUE(GrpcServer::Start(config, {&channel}, &stats, &first).ok());
  config.grpc_endpoint = "127.0.0.1:" + std::to_string(first->port());
  std::unique_ptr<GrpcServer> second;
  Status s = GrpcServer::Start(config, {&channel}, &stats, &second);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(config.grpc_endpoint), std::string::npos) << s.message();

  config.grpc_endpoint = "127.0.0.1:0";
  config.tls.cert_file = "/nonexistent/cert.pem";
  config.tls.key_file = "/nonexistent/key.pem";
  s = GrpcServer::Start(config, {&channel}, &stats, &second);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("/nonexistent/key.pem"), std::string::npos) << s.message();
  first->Stop();
  channel.Stop();
}

// TLS: a self-signed certificate made by the openssl command for this test; the client trusts
// exactly that certificate.
TEST(GrpcServerStartTest, ServesTlsWithTheConfiguredCertificate) {
  const std::string dir = ::testing::TempDir() + "grpc-tls-" + std::to_string(::getpid());
  const std::string cert = dir + "/cert.pem", key = dir + "/key.pem";
  const std::string make = "mkdir -p " + dir + " && openssl req -x509 -newkey rsa:2048 -nodes " +
                           "-subj /CN=localhost -addext subjectAltName=DNS:localhost -days 1 " +
                           "-keyout " + key + " -out " + cert + " >/dev/null 2>&1";
  if (std::system(make.c_str()) != 0)
    GTEST_SKIP() << "the openssl command could not make a certificate";
  FakeLoop loop;
  FarmChannel channel(loop.hub());
  ASSERT_TRUE(channel.Start().ok());
  FrontendStats stats;
  FrontendConfig config;
  config.grpc_endpoint = "127.0.0.1:0";
  config.tls.cert_file = cert;
  config.tls.key_file = key;
  std::unique_ptr<GrpcServer> server;
  Status s = GrpcServer::Start(config, {&channel}, &stats, &server);
  ASSERT_TRUE(s.ok()) << s.ToString();

  std::ifstream file(cert);
  std::stringstream pem;
  pem << file.rdbuf();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pem.str();
  auto tls = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      "localhost:" + std::to_string(server->port()), grpc::SslCredentials(options)));
  grpc::ClientContext tls_context;
  tls_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  inference::ServerLiveResponse live;
  grpc::Status status = tls->ServerLive(&tls_context, {}, &live);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(live.live());

  // A plaintext client gets nowhere.
  auto plain = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      "localhost:" + std::to_string(server->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext plain_context;
  plain_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  EXPECT_FALSE(plain->ServerLive(&plain_context, {}, &live).ok());
  server->Stop();
  channel.Stop();
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace torchfarm
