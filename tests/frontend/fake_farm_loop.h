// FakeFarmLoop: a stand-in for the supervisor's loop in tests (farm_channel.h): a FrontendHub whose
// requests a thread of the test process answers.
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

#include "supervisor/loop/frontend_hub.h"

namespace torchfarm::testing {

class FakeFarmLoop {
 public:
  FakeFarmLoop();
  ~FakeFarmLoop();

  // What the test's FarmChannels attach to.
  FrontendHub& hub() { return hub_; }
  void set_ready(bool ready) { ready_ = ready; }
  int requests() const { return requests_.load(); }
  nlohmann::json last_header() const;

 private:
  void Run();
  void Answer(std::vector<zmq::message_t>& frames);

  FrontendHub hub_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> ready_{true};
  std::atomic<int> requests_{0};
  mutable std::mutex mutex_;
  nlohmann::json last_header_;
  std::thread thread_;
};

}  // namespace torchfarm::testing
