// One client never costs another, against the real binaries with documented defaults:
//   - a client that sends 100 requests of 256 KiB and never reads: another client's requests are
//     answered promptly, no worker restarts, the non-reader's requests past
//     limits.max_unread_reply_bytes_per_client are refused RESOURCE_EXHAUSTED, and once it reads
//     it gets every reply it was promised, byte for byte;
//   - a flooding client (64 in flight) beside a light one (1 in flight): the light client's p99
//     with fair queueing stays near its idle p99, and far below what one FIFO gives it;
//   - timeout_ms 5, 10 and 15 ms with max_queue_delay_us 20000 on an idle farm are served.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "farm_fixture.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int64_t kFloats = 65536;  // [1, 65536] float32: 256 KiB per request and reply

std::string Payload(uint64_t seed, int64_t floats = kFloats) {
  std::string bytes(static_cast<size_t>(floats) * 4, '\0');
  std::mt19937_64 random(seed);
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    uint64_t v = random();
    std::memcpy(&bytes[i], &v, 8);
  }
  return bytes;
}

zmq::socket_t Dealer(zmq::context_t& context, const std::string& endpoint, int timeout_ms) {
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, timeout_ms);
  socket.connect(endpoint);
  return socket;
}

void Send(zmq::socket_t& socket, const std::string& model, uint64_t id, const std::string& payload,
          int64_t floats, json extra = json::object()) {
  json header = {{"v", 1}, {"id", id}, {"model", model},
                 {"inputs", json::array({{{"dtype", "float32"}, {"shape", {1, floats}}}})}};
  header.update(extra);
  socket.send(zmq::buffer(header.dump()), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(payload), zmq::send_flags::none);
}

struct Reply {
  bool received = false;
  json header;
  std::string output;  // the first output frame
};

Reply Receive(zmq::socket_t& socket) {
  Reply reply;
  zmq::message_t header;
  if (!socket.recv(header)) return reply;
  reply.received = true;
  reply.header = json::parse(header.to_string_view(), nullptr, false);
  bool more = header.more();
  bool first = true;
  while (more) {
    zmq::message_t frame;
    if (!socket.recv(frame)) break;
    more = frame.more();
    if (first) reply.output = frame.to_string();
    first = false;
  }
  return reply;
}

json IdentityModel() {
  return {{"name", "identity"},
          {"path", ModelDir() + "/identity.pt"},
          {"inputs", json::array({{{"dtype", "float32"}, {"shape", {-1, kFloats}}}})},
          {"instances", json::array({{{"count", 1}}})}};
}

TEST(ClientFairness, AClientThatStopsReadingCostsNoOtherClient) {
  Farm farm(json::array({IdentityModel()}), {{"heartbeat_ms", nullptr}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  zmq::context_t context(1);
  // The non-reader: takes one message into its socket and then nothing.
  zmq::socket_t stalled(context, zmq::socket_type::dealer);
  stalled.set(zmq::sockopt::linger, 0);
  stalled.set(zmq::sockopt::rcvhwm, 1);
  stalled.set(zmq::sockopt::rcvbuf, 4096);
  stalled.set(zmq::sockopt::rcvtimeo, 30'000);
  stalled.connect(farm.endpoint());
  std::vector<std::string> payloads;
  for (int k = 0; k < 100; ++k) {
    payloads.push_back(Payload(900'000 + k));
    Send(stalled, "identity", 900'000 + k, payloads.back(), kFloats);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1'000));  // its replies pile up

  zmq::socket_t other = Dealer(context, farm.endpoint(), 10'000);
  double worst_ms = 0;
  for (int k = 0; k < 20; ++k) {
    const std::string payload = Payload(k);
    const auto start = Clock::now();
    Send(other, "identity", k + 1, payload, kFloats);
    Reply reply = Receive(other);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    worst_ms = std::max(worst_ms, ms);
    ASSERT_TRUE(reply.received) << "request " << k << " got no answer in 10 s";
    EXPECT_EQ(reply.header.value("status", ""), "ok") << reply.header.dump();
    EXPECT_EQ(reply.output, payload) << "request " << k;
  }
  std::printf("the other client's slowest of 20 requests beside the non-reader: %.1f ms\n",
              worst_ms);
  // The figure is 200 ms; the bound leaves room for a shared 2-core machine, and the
  // defect it guards against took over 30 s.
  EXPECT_LT(worst_ms, 1'000.0);

  // 300 more: each is accepted while its client's unread replies are under the bound when it
  // arrives (64 MiB = 256 replies of 256 KiB; the replies of requests already accepted still
  // come). Once the backlog is past the bound, new requests are refused.
  for (int k = 100; k < 400; ++k) {
    payloads.push_back(Payload(900'000 + k));
    Send(stalled, "identity", 900'000 + k, payloads.back(), kFloats);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1'500));
  for (int k = 400; k < 420; ++k) {
    payloads.push_back(Payload(900'000 + k));
    Send(stalled, "identity", 900'000 + k, payloads.back(), kFloats);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  json stats = farm.Admin("stats");
  ASSERT_TRUE(stats.is_object());
  EXPECT_EQ(stats["workers"][0]["restarts"], 0) << "no worker restart because of a client";

  // It reads at last: every request is answered, each reply either exact or refused by the bound.
  int exact = 0, refused = 0, refused_unread = 0;
  for (size_t n = 0; n < payloads.size(); ++n) {
    Reply reply = Receive(stalled);
    ASSERT_TRUE(reply.received) << "reply " << n << " of " << payloads.size() << " never came";
    const uint64_t id = reply.header.value("id", uint64_t{0});
    ASSERT_GE(id, 900'000u);
    ASSERT_LT(id - 900'000, payloads.size());
    if (reply.header.value("status", "") == "ok") {
      EXPECT_EQ(reply.output, payloads[id - 900'000]) << "reply " << id;
      ++exact;
    } else {
      // Refused by the unread bound, or (while the 300 arrive faster than they are served) by
      // limits.max_queued_per_client; never anything else.
      EXPECT_EQ(reply.header.value("code", ""), "RESOURCE_EXHAUSTED") << reply.header.dump();
      const std::string message = reply.header.value("message", "");
      const bool unread = message.find("max_unread_reply_bytes_per_client") != std::string::npos;
      EXPECT_TRUE(unread || message.find("max_queued_per_client") != std::string::npos)
          << message;
      if (id - 900'000 >= 400) EXPECT_TRUE(unread) << "request " << id << ": " << message;
      ++refused;
      refused_unread += unread;
    }
  }
  std::printf("non-reader: %d replies exact, %d refused (%d by the unread bound)\n", exact,
              refused, refused_unread);
  EXPECT_GE(exact, 256) << "every request accepted before the bound is answered";
  EXPECT_GE(refused_unread, 20) << "requests sent once the backlog passed the bound are refused";
  EXPECT_EQ(exact + refused, 420);

  stats = farm.Admin("stats");
  EXPECT_EQ(stats["workers"][0]["restarts"], 0);
  EXPECT_EQ(stats["supervisor"]["replies"]["undeliverable_full"], 0);
  EXPECT_EQ(stats["supervisor"]["replies"]["undeliverable_gone"], 0);
  // Served again now that it reads.
  const std::string payload = Payload(1);
  Send(stalled, "identity", 7, payload, kFloats);
  Reply again = Receive(stalled);
  EXPECT_EQ(again.header.value("status", ""), "ok") << again.header.dump();
  EXPECT_EQ(again.output, payload);
  EXPECT_EQ(farm.Stop(), 0);
}

// The slow model: x unchanged after int(x[:, 0].max()) 128x128 matmuls, so a batch costs what
// its largest row asks for.
json SlowModel(bool fair) {
  return {{"name", "slow"},
          {"path", ModelDir() + "/slow.pt"},
          {"inputs", json::array({{{"dtype", "float32"}, {"shape", {-1, 4}}}})},
          {"instances", json::array({{{"count", 1}}})},
          {"max_batch_size", 4},
          {"fair_queueing", fair}};
}

constexpr int kMatmuls = 30;  // per batch (~3-10 ms on one core): queueing, not CPU, dominates

std::string SlowInput() {
  float row[4] = {static_cast<float>(kMatmuls), 0, 0, 0};
  return std::string(reinterpret_cast<const char*>(row), sizeof(row));
}

// The light client's latencies (ms) of `count` requests, one at a time.
std::vector<double> LightLatencies(const std::string& endpoint, int count) {
  zmq::context_t context(1);
  zmq::socket_t socket = Dealer(context, endpoint, 30'000);
  std::vector<double> ms;
  // The first runs of a TorchScript model are its profiling runs: not counted.
  constexpr int kWarmup = 5;
  for (int k = -kWarmup; k < count; ++k) {
    const auto start = Clock::now();
    Send(socket, "slow", static_cast<uint64_t>(k + kWarmup + 1), SlowInput(), 4);
    Reply reply = Receive(socket);
    if (!reply.received || reply.header.value("status", "") != "ok") {
      ADD_FAILURE() << "light request " << k << ": " << reply.header.dump();
      break;
    }
    if (k >= 0) {
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
  }
  std::sort(ms.begin(), ms.end());
  return ms;
}

double P99(const std::vector<double>& sorted) {
  if (sorted.empty()) return 1e9;
  return sorted[std::min(sorted.size() - 1, sorted.size() * 99 / 100)];
}

// p99 of the light client beside a flooder that keeps 64 requests in flight.
double LightP99BesideAFlood(const std::string& endpoint, std::vector<double>* light) {
  std::atomic<bool> stop{false};
  std::atomic<int> flood_ok{0};
  std::thread flood([&] {
    zmq::context_t context(1);
    zmq::socket_t socket = Dealer(context, endpoint, 30'000);
    uint64_t id = 1'000'000;
    for (int k = 0; k < 64; ++k) Send(socket, "slow", id++, SlowInput(), 4);
    while (!stop) {
      Reply reply = Receive(socket);
      if (!reply.received) break;
      if (reply.header.value("status", "") == "ok") ++flood_ok;
      Send(socket, "slow", id++, SlowInput(), 4);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the flood's backlog is queued
  *light = LightLatencies(endpoint, 40);
  stop = true;
  flood.join();
  EXPECT_GT(flood_ok.load(), 0) << "the flooder is served too";
  return P99(*light);
}

TEST(ClientFairness, AFloodingClientDoesNotDelayALightOne) {
  double fair_p99 = 0, fifo_p99 = 0, fifo_p50 = 0, idle_p99 = 0, batch_ms = 0;
  for (bool fair : {true, false}) {
    Farm farm(json::array({SlowModel(fair)}), {{"heartbeat_ms", nullptr}});
    ASSERT_TRUE(farm.Start());
    ASSERT_TRUE(farm.WaitReady()) << farm.error();
    std::vector<double> idle = LightLatencies(farm.endpoint(), 40);
    if (fair) {
      idle_p99 = P99(idle);
      batch_ms = idle[idle.size() / 2];  // one request alone: about one batch's time
    }
    std::vector<double> light;
    (fair ? fair_p99 : fifo_p99) = LightP99BesideAFlood(farm.endpoint(), &light);
    if (!fair && !light.empty()) fifo_p50 = light[light.size() / 2];
    EXPECT_EQ(farm.Stop(), 0);
  }
  std::printf("light client p99: idle %.2f ms, beside a 64-deep flood with fair queues %.2f ms, "
              "with one FIFO %.2f ms (p50 %.2f; batch ~%.2f ms)\n",
              idle_p99, fair_p99, fifo_p99, fifo_p50, batch_ms);
  // The bound is 2x idle p99 plus one batch; on 2 shared cores the flooder's own CPU
  // (its client, the supervisor's and the worker's work for it) also slows the light client, so
  // the test allows twice that, and checks that even the fair p99 beats the FIFO's median.
  EXPECT_LT(fair_p99, 2 * (2 * idle_p99 + batch_ms));
  EXPECT_LT(fair_p99, fifo_p50) << "one FIFO puts the light request behind 64 others";
}

TEST(ClientFairness, DeadlinesShorterThanTheBatchDelayAreServedOnAnIdleFarm) {
  json model = ModelEntry("mlp", "mlp.pt", {-1, 256}, 1,
                          {{"max_batch_size", 8}, {"max_queue_delay_us", 20'000}});
  Farm farm(json::array({model}), {{"heartbeat_ms", nullptr}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  zmq::context_t context(1);
  zmq::socket_t socket = Dealer(context, farm.endpoint(), 10'000);
  const std::string input(256 * 4, '\0');
  int served = 0;
  for (int round = 0; round < 5; ++round) {
    for (int timeout_ms : {5, 10, 15}) {
      Send(socket, "mlp", static_cast<uint64_t>(timeout_ms), input, 256,
           {{"timeout_ms", timeout_ms}});
      Reply reply = Receive(socket);
      ASSERT_TRUE(reply.received);
      EXPECT_EQ(reply.header.value("status", ""), "ok")
          << "timeout_ms " << timeout_ms << ": " << reply.header.dump();
      served += reply.header.value("status", "") == "ok";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // idle between requests
    }
  }
  EXPECT_EQ(served, 15);
  EXPECT_EQ(farm.Stop(), 0);
}

}  // namespace
}  // namespace torchfarm::testing
