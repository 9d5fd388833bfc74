// Zero-copy replies (supervisor/workers/pinned_response_ring.h): large outputs leave the supervisor
// as zmq messages pointing into the worker's response slot. These tests hold the real binaries to
// what that must not break: every byte of every reply, other clients while one client stops
// reading, and a worker SIGKILLed while replies still point into its segment.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
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

constexpr int64_t kFloats = 256 * 1024;  // 1 MiB of float32 per row

json IdentityModel(int max_batch) {
  return {{"name", "identity"},
          {"path", ModelDir() + "/identity.pt"},
          {"inputs", json::array({{{"dtype", "float32"}, {"shape", {-1, kFloats}}}})},
          {"instances", json::array({{{"count", 1}}})},
          {"max_batch_size", max_batch},
          {"slot_bytes", 4 << 20}};
}

std::string Payload(uint64_t seed) {
  std::string bytes(kFloats * 4, '\0');
  std::mt19937_64 random(seed);
  for (size_t i = 0; i < bytes.size(); i += 8) {
    uint64_t v = random();
    std::memcpy(&bytes[i], &v, 8);
  }
  return bytes;
}

void Send(zmq::socket_t& socket, uint64_t id, const std::string& payload) {
  json header = {{"v", 1}, {"id", id}, {"model", "identity"},
                 {"inputs", json::array({{{"dtype", "float32"}, {"shape", {1, kFloats}}}})}};
  socket.send(zmq::buffer(header.dump()), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(payload), zmq::send_flags::none);
}

// One reply: its id (0 when none came or it was an error) and its single output frame.
uint64_t Receive(zmq::socket_t& socket, std::string* output) {
  zmq::message_t header;
  if (!socket.recv(header)) return 0;
  json reply = json::parse(header.to_string_view(), nullptr, false);
  std::vector<zmq::message_t> frames;
  bool more = header.more();
  while (more) {
    zmq::message_t frame;
    if (!socket.recv(frame)) return 0;
    more = frame.more();
    frames.push_back(std::move(frame));
  }
  if (!reply.is_object() || reply.value("status", "") != "ok" || frames.size() != 1) {
    ADD_FAILURE() << "bad reply: " << header.to_string();
    return 0;
  }
  *output = frames[0].to_string();
  return reply["id"].get<uint64_t>();
}

zmq::socket_t Dealer(zmq::context_t& context, const std::string& endpoint, int timeout_ms) {
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, timeout_ms);
  socket.connect(endpoint);
  return socket;
}

// `clients` closed-loop clients, `per_client` requests each; counts byte-exact replies.
void RunClients(const std::string& endpoint, int clients, int per_client, int timeout_ms,
                std::atomic<int>* exact, std::atomic<int>* wrong) {
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([=] {
      zmq::context_t context(1);
      zmq::socket_t socket = Dealer(context, endpoint, timeout_ms);
      for (int k = 0; k < per_client; ++k) {
        uint64_t id = static_cast<uint64_t>(c) * 1000 + k + 1;
        std::string payload = Payload(id), output;
        Send(socket, id, payload);
        uint64_t got = Receive(socket, &output);
        if (got == id && output == payload) {
          ++*exact;
        } else {
          ++*wrong;
          ADD_FAILURE() << "client " << c << " request " << k << ": reply id " << got;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST(ZeroCopyReplies, ManyClientsGetEveryByteOfLargeBatchedOutputs) {
  Farm farm(json::array({IdentityModel(4)}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  std::atomic<int> exact{0}, wrong{0};
  RunClients(farm.endpoint(), 8, 25, 30'000, &exact, &wrong);
  EXPECT_EQ(exact.load(), 200);
  EXPECT_EQ(wrong.load(), 0);
  json stats = farm.Admin("stats");
  EXPECT_GT(stats["models"][0]["mean_batch_size"].get<double>(), 1.0)
      << "replies split from batches must be covered too";
  EXPECT_EQ(stats["workers"][0]["restarts"], 0);
  EXPECT_EQ(farm.Stop(), 0);
}

// A client whose DEALER takes at most one message and whose replies therefore stay in the
// supervisor's socket queue, pinning the response slot they point into.
struct StalledClient {
  StalledClient(zmq::context_t& context, const std::string& endpoint, int requests)
      : socket(context, zmq::socket_type::dealer) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::rcvhwm, 1);
    socket.set(zmq::sockopt::rcvbuf, 4096);
    socket.set(zmq::sockopt::rcvtimeo, 30'000);
    socket.connect(endpoint);
    for (int k = 0; k < requests; ++k) {
      payloads.push_back(Payload(900'000 + k));
      Send(socket, 900'000 + k, payloads.back());
    }
  }
  // Reads every reply at last: each must still be exact.
  int ReadAll() {
    int exact = 0;
    for (size_t k = 0; k < payloads.size(); ++k) {
      std::string output;
      uint64_t id = Receive(socket, &output);
      if (id >= 900'000 && id - 900'000 < payloads.size() && output == payloads[id - 900'000]) {
        ++exact;
      }
    }
    return exact;
  }
  zmq::socket_t socket;
  std::vector<std::string> payloads;
};

TEST(ZeroCopyReplies, AClientThatStopsReadingDoesNotStallTheOthers) {
  Farm farm(json::array({IdentityModel(1)}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  zmq::context_t context(1);
  StalledClient stalled(context, farm.endpoint(), 6);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its replies are queued

  // The others are served while the stalled replies stay queued; 10 s per reply at most.
  auto start = std::chrono::steady_clock::now();
  std::atomic<int> exact{0}, wrong{0};
  RunClients(farm.endpoint(), 4, 40, 10'000, &exact, &wrong);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(exact.load(), 160);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LT(seconds, 40.0);
  EXPECT_EQ(stalled.ReadAll(), 6) << "the stalled client's replies arrive whole once it reads";
  json stats = farm.Admin("stats");
  // A pinned reply its client does not read is moved off the worker's slot (detached), never
  // paid for with a worker restart.
  EXPECT_EQ(stats["workers"][0]["restarts"], 0) << stats.dump();
  std::printf("others served in %.1f s; pinned replies detached from their slot: %d\n", seconds,
              stats["supervisor"]["replies"].value("detached_pins", 0));
  EXPECT_EQ(farm.Stop(), 0);
  std::ifstream log(farm.dir() + "/supervisor.log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("replacing the worker"), std::string::npos);
}

TEST(ZeroCopyReplies, AWorkerKilledWhileRepliesPointIntoItsSegment) {
  Farm farm(json::array({IdentityModel(1)}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  zmq::context_t context(1);
  StalledClient stalled(context, farm.endpoint(), 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<pid_t> before = farm.WorkerPids();
  ASSERT_EQ(before.size(), 1u);
  ASSERT_GT(before[0], 0);
  ASSERT_EQ(::kill(before[0], SIGKILL), 0);
  ASSERT_TRUE(farm.WaitReady(-1, 30'000)) << "the killed worker is replaced";

  std::atomic<int> exact{0}, wrong{0};
  RunClients(farm.endpoint(), 2, 20, 10'000, &exact, &wrong);
  EXPECT_EQ(exact.load(), 40);
  EXPECT_EQ(stalled.ReadAll(), 3) << "replies into the dead worker's segment stay readable";
  ::kill(farm.pid(), 0);
  EXPECT_EQ(::kill(farm.pid(), 0), 0) << "the supervisor survived";
  EXPECT_EQ(farm.Stop(), 0);
}

}  // namespace
}  // namespace torchfarm::testing
