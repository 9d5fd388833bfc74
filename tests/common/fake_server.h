// Test support for client tests: a scripted ROUTER server on 127.0.0.1 (no supervisor, no worker
// processes) and small helpers to make input views.
//
// Owns: a ZeroMQ context and ROUTER socket, and the thread that runs the test's script on them.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/protocol.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {

using nlohmann::json;

inline constexpr int kServerWaitMs = 5000;

// A ROUTER socket on 127.0.0.1 driven by a test-supplied script on its own thread. The script
// runs until it returns; the destructor asks it to stop (stopping()) and joins it.
class FakeServer {
 public:
  struct Request {
    std::string identity;
    json header;
    std::vector<std::string> data;
  };
  using Script = std::function<void(FakeServer&)>;

  explicit FakeServer(Script script) : context_(1), socket_(context_, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind("tcp://127.0.0.1:*");
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this, script = std::move(script)] { script(*this); });
  }
  ~FakeServer() {
    stopping_ = true;
    thread_.join();
  }

  const std::string& endpoint() const { return endpoint_; }
  bool stopping() const { return stopping_; }

  bool Receive(Request* out, int timeout_ms = kServerWaitMs) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
    if (!(item.revents & ZMQ_POLLIN)) return false;
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(socket_, std::back_inserter(frames))) return false;
    out->identity = frames[0].to_string();
    out->header = json::parse(frames[1].to_string());
    out->data.clear();
    for (size_t i = 2; i < frames.size(); ++i) out->data.push_back(frames[i].to_string());
    return true;
  }

  void Reply(const std::string& identity, const std::string& header,
             const std::vector<std::string>& data = {}) {
    std::vector<zmq::message_t> frames;
    frames.emplace_back(identity.data(), identity.size());
    frames.emplace_back(header.data(), header.size());
    for (const auto& d : data) frames.emplace_back(d.data(), d.size());
    zmq::send_multipart(socket_, frames);
  }

  // Replies ok with the request's inputs as outputs, optionally under another request's id.
  void ReplyEcho(const Request& to, const Request& content) {
    std::vector<TensorSpec> outputs;
    for (const auto& input : content.header["inputs"]) {
      TensorSpec spec;
      EXPECT_TRUE(TensorSpecFromJson(input, "echo", false, &spec).ok());
      outputs.push_back(spec);
    }
    Reply(to.identity, MakeOkReply(content.header["id"], outputs, StageTimes{1, 2, 3}, 7),
          content.data);
  }
  void ReplyEcho(const Request& request) { ReplyEcho(request, request); }

  void WaitUntilStopping() {
    while (!stopping_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
  std::string endpoint_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

inline void EchoForever(FakeServer& server) {
  while (!server.stopping()) {
    FakeServer::Request request;
    if (server.Receive(&request, 20)) server.ReplyEcho(request);
  }
}

template <typename T>
inline TensorView View(const std::vector<T>& values, DType dtype, std::vector<int64_t> shape) {
  return TensorView{TensorSpec{dtype, std::move(shape)}, values.data(), values.size() * sizeof(T)};
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

}  // namespace torchfarm::testing
