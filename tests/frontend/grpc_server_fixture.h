// The GrpcServer tests' fixture (grpc_server_test.cc, grpc_triton_test.cc): GrpcServer over a
// real gRPC channel against FakeLoop, a FrontendHub whose requests a thread of the test answers
// like the supervisor's loop (farm_channel.h).
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/model_versions.h"
#include "proto/grpc_service.grpc.pb.h"
#include "supervisor/frontend/farm_channel.h"
#include "supervisor/frontend/frontend_stats.h"
#include "supervisor/frontend/grpc_server.h"
#include "tests/frontend/hub_loop.h"
#include "tests/frontend/typed_request_json.h"

namespace torchfarm {
namespace {

using nlohmann::json;

// The fake loop. Models: "identity" echoes its inputs as OUTPUT__0.. (and "name" OUTPUT__k);
// "fail_<CODE>" answers that error; "silent" never answers. A "meta" query gets two models,
// "identity" (ready) and "cold" (not ready).
class FakeLoop {
 public:
  FakeLoop() {
    thread_ = std::thread([this] { Run(); });
  }
  ~FakeLoop() {
    stop_ = true;
    thread_.join();
  }
  FrontendHub& hub() { return hub_; }
  std::string last_tag() {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_tag_;
  }
  json last_header() {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_header_;
  }
  std::string last_model() {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_header_.is_object() ? last_header_.value("model", "") : "";
  }

  static json Meta() {
    auto tensor = [](const char* name) {
      return json{{"name", name}, {"datatype", "FP32"}, {"shape", {-1, 4}}};
    };
    json identity = {{"name", "identity"},
                     {"versions", {"1"}},
                     {"platform", "pytorch_libtorch"},
                     {"ready", true},
                     {"inputs", {tensor("INPUT__0")}},
                     {"outputs", {tensor("OUTPUT__0")}}};
    json cold = identity;
    cold["name"] = "cold";
    cold["ready"] = false;
    return {{"status", "ok"},
            {"live", true},
            {"ready", false},
            {"draining", false},
            {"models", {identity, cold}}};
  }

 private:
  void Run() {
    while (!stop_) {
      std::vector<zmq::message_t> parts;
      if (testing::ReceiveFromHub(hub_, &parts, std::chrono::milliseconds(20))) Answer(parts);
    }
  }

  void Answer(std::vector<zmq::message_t>& parts) {
    // [identity][tag][call id][header][frames...]; replies carry the call id, as the loop's.
    std::string tag;
    json header;
    if (!testing::ReadFrontendMessage(parts, &tag, &header)) return;
    header["id"] = std::stoull(parts[2].to_string());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last_tag_ = tag;
      last_header_ = header;
    }
    std::vector<zmq::message_t> reply;
    reply.emplace_back(parts[0].data(), parts[0].size());
    if (tag == kMetaTag) {
      json meta = Meta();
      meta["id"] = header["id"];
      reply.emplace_back(meta.dump());
      testing::ReplyThroughHub(hub_, std::move(reply));
      return;
    }
    const std::string model = header.value("model", "");
    if (model == "silent") return;
    if (header.value("version", "1") != "1") {
      // Like the farm (common/model_versions.h): a version it does not serve is NOT_FOUND.
      json error = {
          {"v", 1},
          {"id", header["id"]},
          {"status", "error"},
          {"code", "NOT_FOUND"},
          {"message", VersionNotLoaded(model, header.value("version", ""), {"1"}).message()}};
      reply.emplace_back(error.dump());
      testing::ReplyThroughHub(hub_, std::move(reply));
      return;
    }
    if (model.rfind("fail_", 0) == 0) {
      json error = {{"v", 1},
                    {"id", header["id"]},
                    {"status", "error"},
                    {"code", model.substr(5)},
                    {"message", "fake " + model.substr(5)}};
      reply.emplace_back(error.dump());
      testing::ReplyThroughHub(hub_, std::move(reply));
      return;
    }
    json outputs = json::array();
    for (size_t i = 0; i < header["inputs"].size(); ++i) {
      const json& in = header["inputs"][i];
      outputs.push_back({{"name", "OUTPUT__" + std::to_string(i)},
                         {"dtype", in["dtype"]},
                         {"shape", in["shape"]}});
    }
    json ok = {{"v", 1},
               {"id", header["id"]},
               {"status", "ok"},
               {"outputs", outputs},
               {"timing_us", {{"queue", 1}, {"compute", 2}, {"total", 3}}},
               {"worker", 0}};
    reply.emplace_back(ok.dump());
    for (size_t i = 4; i < parts.size(); ++i) reply.push_back(std::move(parts[i]));
    testing::ReplyThroughHub(hub_, std::move(reply));
  }

  FrontendHub hub_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::string last_tag_;
  json last_header_;
};

class GrpcServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loop_ = std::make_unique<FakeLoop>();
    for (int i = 0; i < 2; ++i) {
      channels_.push_back(std::make_unique<FarmChannel>(loop_->hub()));
      ASSERT_TRUE(channels_.back()->Start().ok());
    }
    FrontendConfig config;
    config.grpc_endpoint = "127.0.0.1:0";
    config.max_body_bytes = 1 << 20;
    Configure(config);
    Status s =
        GrpcServer::Start(config, {channels_[0].get(), channels_[1].get()}, &stats_, &server_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_GT(server_->port(), 0);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                       grpc::InsecureChannelCredentials());
    stub_ = inference::GRPCInferenceService::NewStub(channel);
  }
  void TearDown() override {
    if (server_) server_->Stop();
    for (auto& channel : channels_) channel->Stop();
  }
  // A suite's changes to the server's config before it starts.
  virtual void Configure(FrontendConfig& /*config*/) {}

  grpc::Status Infer(const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response, int deadline_ms = 5000) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
    return stub_->ModelInfer(&context, request, response);
  }

  static inference::ModelInferRequest RawRequest(const std::string& model,
                                                 const std::vector<float>& values) {
    inference::ModelInferRequest request;
    request.set_model_name(model);
    request.set_id("req-7");
    auto* input = request.add_inputs();
    input->set_name("INPUT__0");
    input->set_datatype("FP32");
    input->add_shape(1);
    input->add_shape(static_cast<int64_t>(values.size()));
    request.add_raw_input_contents(reinterpret_cast<const char*>(values.data()),
                                   values.size() * sizeof(float));
    return request;
  }

  std::unique_ptr<FakeLoop> loop_;
  std::vector<std::unique_ptr<FarmChannel>> channels_;
  FrontendStats stats_;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

}  // namespace
}  // namespace torchfarm
