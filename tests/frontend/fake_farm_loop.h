// FakeFarmLoop: a stand-in for the supervisor's front-end socket in tests (farm_channel.h): a
// ROUTER bound to an inproc endpoint, answered by a thread of the test process.
//
// Models: "echo" returns its inputs as outputs without names (the front end falls back to
// OUTPUT__k); "named" returns its inputs in reverse order, output k named "out_<input name>";
// "code-<CODE>" answers an error with that wire code (e.g. "code-RESOURCE_EXHAUSTED"); "silent"
// never answers; anything
// else is NOT_FOUND. "meta" queries get live/ready/draining and the metadata of "echo" and "named".
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

namespace torchfarm::testing {

class FakeFarmLoop {
 public:
  FakeFarmLoop(zmq::context_t& context, std::string endpoint);
  ~FakeFarmLoop();

  const std::string& endpoint() const { return endpoint_; }
  void set_ready(bool ready) { ready_ = ready; }
  int requests() const { return requests_.load(); }
  nlohmann::json last_header() const;

 private:
  void Run();
  void Answer(std::vector<zmq::message_t>& frames);

  std::string endpoint_;
  zmq::socket_t socket_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> ready_{true};
  std::atomic<int> requests_{0};
  mutable std::mutex mutex_;
  nlohmann::json last_header_;
  std::thread thread_;
};

}  // namespace torchfarm::testing
