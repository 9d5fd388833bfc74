// Triton's system shared memory extension against the real supervisor and workers (issue 30), as
// a Triton client meets it over HTTP and gRPC: register a POSIX region it made, infer with inputs
// and outputs in it (add2, two named inputs at their own offsets, its output at a third), status,
// unregister; the hostile cases (a region truncated after register, a lying offset, an unknown
// region), each followed by a good request, with the worker never restarted; and a farm with the
// config key off, which refuses every call naming it and does not list the extension.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "proto/grpc_service.grpc.pb.h"
#include "tests/integration/farm_fixture.h"
#include "tests/integration/http_test_client.h"

namespace torchfarm {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using nlohmann::json;
using testing::Farm;
using testing::ModelEntry;

using Reply = testing::HttpReply;

Reply Send(int port, http::verb verb, const std::string& target, const std::string& body = {}) {
  return testing::HttpOnce(port, verb, target, body);
}

// The client's own region: a POSIX object it creates and maps, as tritonclient's
// create_shared_memory_region does.
class ClientRegion {
 public:
  ClientRegion(const std::string& tag, size_t bytes)
      : key_("/tf-it-" + std::to_string(::getpid()) + "-" + tag), bytes_(bytes) {
    fd_ = ::shm_open(key_.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(::ftruncate(fd_, static_cast<off_t>(bytes)), 0);
    data_ =
        static_cast<uint8_t*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
  }
  ~ClientRegion() {
    ::munmap(data_, bytes_);
    ::close(fd_);
    ::shm_unlink(key_.c_str());
  }
  void Write(size_t offset, const std::vector<float>& values) {
    std::memcpy(data_ + offset, values.data(), values.size() * 4);
  }
  std::vector<float> Read(size_t offset, size_t count) const {
    std::vector<float> out(count);
    std::memcpy(out.data(), data_ + offset, count * 4);
    return out;
  }
  void Truncate(size_t bytes) { ASSERT_EQ(::ftruncate(fd_, static_cast<off_t>(bytes)), 0); }
  const std::string& key() const { return key_; }

 private:
  std::string key_;
  size_t bytes_;
  int fd_ = -1;
  uint8_t* data_ = nullptr;
};

const std::vector<float> kX = {1, 2, 3, 4, 5, 6};
const std::vector<float> kY = {0.5f, -1, 4, 8, -2, 0};

std::vector<float> Sum(const std::vector<float>& x, const std::vector<float>& y) {
  std::vector<float> out;
  for (size_t i = 0; i < x.size(); ++i) out.push_back(x[i] + 2 * y[i]);
  return out;
}

json Add2ShmBody(const std::string& region, uint64_t x_offset, uint64_t y_offset,
                 uint64_t sum_offset, uint64_t sum_bytes = 24) {
  auto input = [&](const char* name, uint64_t offset) {
    return json{{"name", name},
                {"datatype", "FP32"},
                {"shape", {2, 3}},
                {"parameters",
                 {{"shared_memory_region", region},
                  {"shared_memory_offset", offset},
                  {"shared_memory_byte_size", 24}}}};
  };
  return {{"inputs", {input("x", x_offset), input("y", y_offset)}},
          {"outputs",
           {{{"name", "sum"},
             {"parameters",
              {{"shared_memory_region", region},
               {"shared_memory_offset", sum_offset},
               {"shared_memory_byte_size", sum_bytes}}}}}}};
}

json Add2Entry() {
  json add2 = ModelEntry("add2", "add2.pt", {-1, 3}, 1, {{"max_batch_size", 4}});
  add2["inputs"] = {{{"name", "x"}, {"dtype", "float32"}, {"shape", {-1, 3}}},
                    {{"name", "y"}, {"dtype", "float32"}, {"shape", {-1, 3}}}};
  add2["outputs"] = {{{"name", "sum"}, {"dtype", "float32"}, {"shape", {-1, 3}}}};
  return add2;
}

class V2SystemShm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    farm_ = new Farm(json::array({Add2Entry()}), {{"http_endpoint", "127.0.0.1:0"},
                                                  {"grpc_endpoint", "127.0.0.1:0"},
                                                  {"frontend", {{"system_shared_memory", true}}}});
    ASSERT_TRUE(farm_->Start());
    ASSERT_TRUE(farm_->WaitReady());
    const json stats = farm_->Admin("stats");
    http_port_ = stats["frontend"]["http"]["port"].get<int>();
    grpc_port_ = stats["frontend"]["grpc"]["port"].get<int>();
  }
  static void TearDownTestSuite() {
    delete farm_;
    farm_ = nullptr;
  }
  void TearDown() override {
    Send(http_port_, http::verb::post, "/v2/systemsharedmemory/unregister");
  }
  Reply Register(const std::string& name, const std::string& key, uint64_t offset, uint64_t bytes) {
    return Send(http_port_, http::verb::post, "/v2/systemsharedmemory/region/" + name + "/register",
                json{{"key", key}, {"offset", offset}, {"byte_size", bytes}}.dump());
  }
  Reply Infer(const json& body) {
    return Send(http_port_, http::verb::post, "/v2/models/add2/infer", body.dump());
  }
  // A good request on a fresh region: the sum lands where asked.
  void ExpectGoodRequest() {
    ClientRegion region("good", 256);
    region.Write(0, kX);
    region.Write(100, kY);
    ASSERT_EQ(Register("good", region.key(), 0, 256).status, 200);
    const Reply reply = Infer(Add2ShmBody("good", 0, 100, 200));
    ASSERT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(region.Read(200, 6), Sum(kX, kY));
    ASSERT_EQ(
        Send(http_port_, http::verb::post, "/v2/systemsharedmemory/region/good/unregister").status,
        200);
  }
  int64_t WorkerRestarts() { return farm_->Admin("stats")["workers"][0]["restarts"]; }
  std::unique_ptr<inference::GRPCInferenceService::Stub> Stub() {
    return inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(grpc_port_), grpc::InsecureChannelCredentials()));
  }

  static Farm* farm_;
  static int http_port_;
  static int grpc_port_;
};
Farm* V2SystemShm::farm_ = nullptr;
int V2SystemShm::http_port_ = 0;
int V2SystemShm::grpc_port_ = 0;

TEST_F(V2SystemShm, HttpRegisterInferStatusUnregister) {
  const json server = Send(http_port_, http::verb::get, "/v2").Json();
  EXPECT_EQ(server["extensions"].back(), "system_shared_memory");
  ClientRegion region("http", 4096);
  region.Write(1000 + 8, kX);   // registered at 1000: request offsets count from there
  region.Write(1000 + 40, kY);  // an odd place: no alignment needed
  ASSERT_EQ(Register("io", region.key(), 1000, 200).status, 200);
  const Reply status = Send(http_port_, http::verb::get, "/v2/systemsharedmemory/status");
  ASSERT_EQ(status.status, 200);
  EXPECT_EQ(status.Json(), json::parse(R"([{"name":"io","key":")" + region.key() +
                                       R"(","offset":1000,"byte_size":200}])"));
  for (int round = 0; round < 3; ++round) {
    const Reply reply = Infer(Add2ShmBody("io", 8, 40, 100));
    ASSERT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(reply.Json()["outputs"][0],
              json::parse(R"({"name":"sum","datatype":"FP32","shape":[2,3]})"));
    EXPECT_EQ(region.Read(1000 + 100, 6), Sum(kX, kY));
    region.Write(1000 + 100, {0, 0, 0, 0, 0, 0});
  }
  EXPECT_EQ(Send(http_port_, http::verb::get, "/v2/systemsharedmemory/region/io/status").Json(),
            status.Json());
  const Reply twice = Register("io", region.key(), 0, 16);
  EXPECT_EQ(twice.status, 400);
  EXPECT_EQ(twice.Json()["error"], "shared memory region 'io' already in manager");
  ASSERT_EQ(
      Send(http_port_, http::verb::post, "/v2/systemsharedmemory/region/io/unregister").status,
      200);
  EXPECT_EQ(Send(http_port_, http::verb::get, "/v2/systemsharedmemory/status").body, "[]");
  const Reply gone =
      Send(http_port_, http::verb::post, "/v2/systemsharedmemory/region/io/unregister");
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(gone.Json()["error"],
            "Unable to find shared memory region: 'io' (it is not registered)");
  EXPECT_EQ(WorkerRestarts(), 0);
}

TEST_F(V2SystemShm, HostileRequestsFailAloneAndTheWorkerLivesOn) {
  ClientRegion region("hostile", 4096);
  region.Write(0, kX);
  region.Write(24, kY);
  ASSERT_EQ(Register("h", region.key(), 0, 4096).status, 200);
  // A lying offset.
  Reply reply = Infer(Add2ShmBody("h", 4090, 24, 48));
  EXPECT_EQ(reply.status, 400);
  EXPECT_EQ(reply.Json()["error"],
            "input 'x': Invalid offset + byte size for shared memory region: 'h': offset 4090 + "
            "24 bytes = 4114, the region has 4096 bytes");
  ExpectGoodRequest();
  // An unknown region.
  reply = Infer(Add2ShmBody("nope", 0, 24, 48));
  EXPECT_EQ(reply.status, 404);
  EXPECT_NE(reply.body.find("Unable to find shared memory region: 'nope'"), std::string::npos);
  ExpectGoodRequest();
  // A byte size that does not match shape x datatype.
  json wrong = Add2ShmBody("h", 0, 24, 48);
  wrong["inputs"][1]["parameters"]["shared_memory_byte_size"] = 20;
  reply = Infer(wrong);
  EXPECT_EQ(reply.status, 400);
  EXPECT_EQ(reply.Json()["error"],
            "inputs[1] ('y'): FP32 [2, 3] needs 24 bytes, parameters.shared_memory_byte_size is "
            "20");
  // An output place too small for the output.
  reply = Infer(Add2ShmBody("h", 0, 24, 48, 20));
  EXPECT_EQ(reply.status, 400);
  EXPECT_NE(reply.body.find("output 'sum': shared_memory_byte_size is 20 bytes, the output is "
                            "float32 [2, 3], 24 bytes"),
            std::string::npos)
      << reply.body;
  ExpectGoodRequest();
  // Truncated after register: INVALID_ARGUMENT naming the sizes, nothing else hurt.
  region.Truncate(16);
  reply = Infer(Add2ShmBody("h", 0, 24, 48));
  EXPECT_EQ(reply.status, 400);
  EXPECT_NE(reply.body.find("the region shrank to 16 bytes after the request was accepted, it "
                            "needs bytes [0, 0 + 24)"),
            std::string::npos)
      << reply.body;
  ExpectGoodRequest();
  EXPECT_EQ(WorkerRestarts(), 0);
}

TEST_F(V2SystemShm, GrpcRegisterInferStatusUnregister) {
  auto stub = Stub();
  auto context = [] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return c;
  };
  inference::ServerMetadataResponse server;
  ASSERT_TRUE(stub->ServerMetadata(context().get(), {}, &server).ok());
  EXPECT_EQ(server.extensions(server.extensions_size() - 1), "system_shared_memory");

  ClientRegion region("grpc", 1024);
  region.Write(0, kX);
  region.Write(512, kY);
  inference::SystemSharedMemoryRegisterRequest reg;
  reg.set_name("g");
  reg.set_key(region.key());
  reg.set_offset(0);
  reg.set_byte_size(1024);
  inference::SystemSharedMemoryRegisterResponse registered;
  grpc::Status s = stub->SystemSharedMemoryRegister(context().get(), reg, &registered);
  ASSERT_TRUE(s.ok()) << s.error_message();
  s = stub->SystemSharedMemoryRegister(context().get(), reg, &registered);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "shared memory region 'g' already in manager");

  inference::ModelInferRequest request;
  request.set_model_name("add2");
  for (const auto& [name, offset] : {std::pair{"x", 0}, std::pair{"y", 512}}) {
    auto* input = request.add_inputs();
    input->set_name(name);
    input->set_datatype("FP32");
    input->add_shape(2);
    input->add_shape(3);
    auto& params = *input->mutable_parameters();
    params["shared_memory_region"].set_string_param("g");
    params["shared_memory_byte_size"].set_int64_param(24);
    params["shared_memory_offset"].set_int64_param(offset);
  }
  auto* output = request.add_outputs();
  output->set_name("sum");
  (*output->mutable_parameters())["shared_memory_region"].set_string_param("g");
  (*output->mutable_parameters())["shared_memory_byte_size"].set_int64_param(24);
  (*output->mutable_parameters())["shared_memory_offset"].set_int64_param(700);
  inference::ModelInferResponse response;
  s = stub->ModelInfer(context().get(), request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(region.Read(700, 6), Sum(kX, kY));
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).parameters().at("shared_memory_region").string_param(), "g");
  EXPECT_EQ(response.outputs(0).parameters().at("shared_memory_offset").int64_param(), 700);
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0), "");

  inference::SystemSharedMemoryStatusRequest status_request;
  inference::SystemSharedMemoryStatusResponse status;
  ASSERT_TRUE(stub->SystemSharedMemoryStatus(context().get(), status_request, &status).ok());
  ASSERT_EQ(status.regions().count("g"), 1u);
  EXPECT_EQ(status.regions().at("g").key(), region.key());
  EXPECT_EQ(status.regions().at("g").byte_size(), 1024u);
  status_request.set_name("missing");
  s = stub->SystemSharedMemoryStatus(context().get(), status_request, &status);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "Unable to find system shared memory region: 'missing'");

  inference::SystemSharedMemoryUnregisterRequest unreg;
  unreg.set_name("g");
  inference::SystemSharedMemoryUnregisterResponse unregistered;
  ASSERT_TRUE(stub->SystemSharedMemoryUnregister(context().get(), unreg, &unregistered).ok());
  s = stub->ModelInfer(context().get(), request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("Unable to find shared memory region: 'g'"), std::string::npos);
  EXPECT_EQ(stub->SystemSharedMemoryUnregister(context().get(), unreg, &unregistered).error_code(),
            grpc::StatusCode::NOT_FOUND);
  ExpectGoodRequest();
}

// The config key at its other value (its default): every call refused naming it, the extension
// not listed, and inference with shared-memory parameters refused before it reaches the farm.
TEST(V2SystemShmOff, EveryCallIsRefusedNamingTheKey) {
  Farm farm(json::array({Add2Entry()}),
            {{"http_endpoint", "127.0.0.1:0"}, {"grpc_endpoint", "127.0.0.1:0"}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady());
  const json stats = farm.Admin("stats");
  const int http_port = stats["frontend"]["http"]["port"].get<int>();
  const int grpc_port = stats["frontend"]["grpc"]["port"].get<int>();
  const std::string key = "set \\\"frontend\\\": {\\\"system_shared_memory\\\": true}";
  for (const auto& [verb, target] : std::vector<std::pair<http::verb, std::string>>{
           {http::verb::get, "/v2/systemsharedmemory/status"},
           {http::verb::post, "/v2/systemsharedmemory/region/r/register"},
           {http::verb::post, "/v2/systemsharedmemory/unregister"}}) {
    const Reply reply = Send(http_port, verb, target, R"({"key":"/k","byte_size":4})");
    EXPECT_EQ(reply.status, 503) << target;
    EXPECT_NE(reply.body.find(key), std::string::npos) << reply.body;
  }
  const Reply infer = Send(http_port, http::verb::post, "/v2/models/add2/infer",
                           Add2ShmBody("r", 0, 24, 48).dump());
  EXPECT_EQ(infer.status, 400);
  EXPECT_NE(infer.body.find("parameters.shared_memory_region: system shared memory is off"),
            std::string::npos)
      << infer.body;
  for (const json& e : Send(http_port, http::verb::get, "/v2").Json()["extensions"]) {
    EXPECT_NE(e, "system_shared_memory");
  }
  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(grpc_port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  inference::SystemSharedMemoryStatusResponse status;
  const grpc::Status s = stub->SystemSharedMemoryStatus(&context, {}, &status);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("\"system_shared_memory\": true"), std::string::npos);
  grpc::ClientContext metadata_context;
  inference::ServerMetadataResponse server;
  ASSERT_TRUE(stub->ServerMetadata(&metadata_context, {}, &server).ok());
  for (const std::string& e : server.extensions()) EXPECT_NE(e, "system_shared_memory");
  // A good request still works.
  const Reply good =
      Send(http_port, http::verb::post, "/v2/models/add2/infer",
           json{{"inputs",
                 {{{"name", "x"}, {"datatype", "FP32"}, {"shape", {2, 3}}, {"data", kX}},
                  {{"name", "y"}, {"datatype", "FP32"}, {"shape", {2, 3}}, {"data", kY}}}}}
               .dump());
  ASSERT_EQ(good.status, 200) << good.body;
  EXPECT_EQ(good.Json()["outputs"][0]["data"].get<std::vector<float>>(), Sum(kX, kY));
}

}  // namespace
}  // namespace torchfarm
