// Client shared memory (docs/protocol.md, "Shared-memory tensors"), end to end with the real
// binaries: byte-exact round trips in place and through the ring, batches of shared-memory
// requests, a worker SIGKILLed mid-request, a release while a request still uses the region, and
// nothing left in /dev/shm afterwards.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "farm_fixture.h"
#include "ipc/shared_region.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;

constexpr int64_t kFloats = 256 * 1024;  // 1 MiB of float32
constexpr uint64_t kBytes = kFloats * 4;

json Model(const std::string& name, int max_batch, int64_t delay_us = 0) {
  return {{"name", name},
          {"path", ModelDir() + "/" + name + ".pt"},
          {"inputs", json::array({{{"dtype", "float32"}, {"shape", {-1, kFloats}}}})},
          {"instances", json::array({{{"count", 1}}})},
          {"max_batch_size", max_batch},
          {"max_queue_delay_us", delay_us},
          {"slot_bytes", 9 << 20}};
}

bool DevShmHas(const std::string& name) { return ::access(("/dev/shm" + name).c_str(), F_OK) == 0; }

void StartReady(Farm& farm) {
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
}

// A client region as the test sees it: its token, its name and the test's own mapping.
struct Region {
  std::string token;
  std::string name;
  std::unique_ptr<ipc::SharedRegion> map;
};

// A DEALER client that speaks the shared-memory part of the protocol by hand.
class ShmClient {
 public:
  explicit ShmClient(const std::string& endpoint) : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::rcvtimeo, 30'000);
    socket_.connect(endpoint);
  }

  json Call(const json& header) {
    Send(header);
    return Receive();
  }
  void Send(const json& header) { socket_.send(zmq::buffer(header.dump()), zmq::send_flags::none); }
  json Receive() {
    std::vector<zmq::message_t> frames;
    zmq::message_t frame;
    do {
      if (!socket_.recv(frame)) return json();
      frames.push_back(std::move(frame));
    } while (frames.back().more());
    EXPECT_EQ(frames.size(), 1u) << "shared-memory replies carry no data frames";
    return json::parse(frames[0].to_string_view(), nullptr, false);
  }

  // Creates a region and maps it (map is null when that failed).
  Region Create(uint64_t bytes) {
    json reply = Call({{"v", 1}, {"id", 0}, {"op", "shm_create"}, {"bytes", bytes}});
    EXPECT_EQ(reply.value("status", ""), "ok") << reply.dump();
    Region region;
    if (reply.value("status", "") != "ok") return region;
    region.token = reply["shm"]["region"];
    region.name = reply["shm"]["name"];
    EXPECT_TRUE(ipc::SharedRegion::Open(region.name, &region.map).ok());
    return region;
  }

  static json Infer(uint64_t id, const std::string& model, const std::string& token,
                    uint64_t in_offset, uint64_t out_offset) {
    return {{"v", 1},
            {"id", id},
            {"model", model},
            {"inputs", json::array({{{"dtype", "float32"},
                                     {"shape", {1, kFloats}},
                                     {"shm", {{"region", token}, {"offset", in_offset}}}}})},
            {"output_shm", {{"region", token}, {"offset", out_offset}, {"bytes", kBytes}}}};
  }

 private:
  zmq::context_t context_{1};
  zmq::socket_t socket_;
};

void Fill(uint8_t* bytes, uint64_t seed, float first = -1) {
  std::mt19937 random(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  auto* floats = reinterpret_cast<float*>(bytes);
  for (int64_t i = 0; i < kFloats; ++i) floats[i] = uniform(random);
  if (first >= 0) floats[0] = first;
}

// True when /proc/PID/maps lists a mapping of shared-memory object `name`.
bool MapsMention(pid_t pid, const std::string& name) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/dev/shm" + name) != std::string::npos) return true;
  }
  return false;
}

class ClientShmRoundTrip : public ::testing::TestWithParam<bool> {};

TEST_P(ClientShmRoundTrip, EveryByteComesBackAndReleaseLeavesNothing) {
  const bool in_place = GetParam();
  Farm farm(json::array({Model("identity", 1)}), {{"client_shm", {{"in_place", in_place}}}});
  ASSERT_NO_FATAL_FAILURE(StartReady(farm));
  ShmClient client(farm.endpoint());
  auto [token, name, map] = client.Create(2 * kBytes + 4096);
  ASSERT_TRUE(map);
  for (uint64_t id = 1; id <= 12; ++id) {
    // Inputs at an unaligned (but float-aligned) offset; outputs after them.
    Fill(map->data() + 4, id);
    std::memset(map->data() + kBytes + 64, 0, kBytes);
    json reply = client.Call(ShmClient::Infer(id, "identity", token, 4, kBytes + 64));
    ASSERT_EQ(reply.value("status", ""), "ok") << reply.dump();
    EXPECT_EQ(reply["id"], id);
    EXPECT_EQ(reply["outputs"][0]["shm"], (json{{"region", token}, {"offset", kBytes + 64}}));
    EXPECT_EQ(std::memcmp(map->data() + 4, map->data() + kBytes + 64, kBytes), 0) << "request " << id;
  }
  json stats = farm.Admin("stats");
  EXPECT_EQ(stats["client_shm"]["regions"], 1);
  EXPECT_EQ(stats["client_shm"]["bytes"], 2 * kBytes + 4096);
  EXPECT_EQ(stats["client_shm"]["in_place_batches"], in_place ? 12 : 0);
  json released = client.Call({{"v", 1}, {"id", 99}, {"op", "shm_release"}, {"region", token}});
  EXPECT_EQ(released, (json{{"v", 1}, {"id", 99}, {"status", "ok"}}));
  EXPECT_FALSE(DevShmHas(name));
  EXPECT_EQ(farm.Admin("stats")["client_shm"]["regions"], 0);
  // The worker lets go of its mapping of a removed region within about a second.
  const std::vector<pid_t> workers = farm.WorkerPids();
  ASSERT_EQ(workers.size(), 1u);
  bool mapped = true;
  for (int i = 0; i < 40 && mapped; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    mapped = MapsMention(workers[0], name);
  }
  EXPECT_FALSE(mapped) << "worker " << workers[0] << " still maps " << name;
  EXPECT_EQ(farm.Stop(), 0);
}

INSTANTIATE_TEST_SUITE_P(InPlaceAndThroughTheRing, ClientShmRoundTrip, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "InPlace" : "ThroughRing"; });

TEST(ClientShm, BatchedRequestsEachGetTheirOwnRows) {
  Farm farm(json::array({Model("identity", 8, 50'000)}));
  ASSERT_NO_FATAL_FAILURE(StartReady(farm));
  constexpr int kClients = 6, kRounds = 4;
  std::vector<std::thread> threads;
  std::atomic<int> exact{0};
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      ShmClient client(farm.endpoint());
      auto [token, name, map] = client.Create(2 * kBytes);
      if (!map) return;
      for (int k = 0; k < kRounds; ++k) {
        Fill(map->data(), c * 100 + k);
        json reply = client.Call(ShmClient::Infer(k, "identity", token, 0, kBytes));
        EXPECT_EQ(reply.value("status", ""), "ok") << reply.dump();
        if (std::memcmp(map->data(), map->data() + kBytes, kBytes) == 0) ++exact;
      }
      client.Call({{"v", 1}, {"id", 9}, {"op", "shm_release"}, {"region", token}});
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(exact.load(), kClients * kRounds);
  json stats = farm.Admin("stats");
  EXPECT_GT(stats["models"][0]["mean_batch_size"].get<double>(), 1.0)
      << "the copy path of batched shared-memory requests must be covered";
  EXPECT_LT(stats["client_shm"]["in_place_batches"].get<int>(), kClients * kRounds)
      << "batches of several requests go through the ring";
  EXPECT_EQ(stats["client_shm"]["regions"], 0);
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(ClientShm, WorkerKilledMidRequestRunsItAgainInPlace) {
  Farm farm(json::array({Model("slow", 1)}));
  ASSERT_NO_FATAL_FAILURE(StartReady(farm));
  ShmClient client(farm.endpoint());
  auto [token, name, map] = client.Create(2 * kBytes);
  ASSERT_TRUE(map);
  Fill(map->data(), 7, /*first=*/10000);  // slow: about 0.4-1 s of matmuls
  std::vector<pid_t> pids = farm.WorkerPids();
  ASSERT_EQ(pids.size(), 1u);
  client.Send(ShmClient::Infer(1, "slow", token, 0, kBytes));
  // Release while the request is in flight: it must still complete, and the name go after it.
  client.Send({{"v", 1}, {"id", 2}, {"op", "shm_release"}, {"region", token}});
  json released = client.Receive();
  EXPECT_EQ(released.value("status", ""), "ok") << released.dump();
  EXPECT_TRUE(DevShmHas(name)) << "a request still uses the region";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(::kill(pids[0], SIGKILL), 0);
  json reply = client.Receive();
  ASSERT_EQ(reply.value("status", ""), "ok") << reply.dump();
  EXPECT_EQ(std::memcmp(map->data(), map->data() + kBytes, kBytes), 0);
  EXPECT_FALSE(DevShmHas(name)) << "released and answered: the name must be gone";
  json stats = farm.Admin("stats");
  EXPECT_EQ(stats["workers"][0]["restarts"], 1);
  EXPECT_EQ(stats["client_shm"]["in_place_batches"], 2) << "run in place, killed, run again";
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(ClientShm, OutputRangeOverlappingTheInputStillGetsTheInputsBytes) {
  Farm farm(json::array({Model("identity", 1)}));
  ASSERT_NO_FATAL_FAILURE(StartReady(farm));
  ShmClient client(farm.endpoint());
  auto [token, name, map] = client.Create(2 * kBytes);
  ASSERT_TRUE(map);
  Fill(map->data(), 3);
  std::vector<uint8_t> expected(map->data(), map->data() + kBytes);
  // Output half a tensor past the input: written in place it would read bytes it already wrote.
  json reply = client.Call(ShmClient::Infer(1, "identity", token, 0, kBytes / 2));
  ASSERT_EQ(reply.value("status", ""), "ok") << reply.dump();
  EXPECT_EQ(std::memcmp(map->data() + kBytes / 2, expected.data(), kBytes), 0);
  json stats = farm.Admin("stats");
  EXPECT_EQ(stats["client_shm"]["in_place_batches"], 1) << "the input is still read in place";
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(ClientShm, AClientThatTruncatesItsRegionFailsOnlyItsOwnRequest) {
  Farm farm(json::array({Model("identity", 1)}));
  ASSERT_NO_FATAL_FAILURE(StartReady(farm));
  ShmClient client(farm.endpoint());
  auto [token, name, map] = client.Create(2 * kBytes);
  ASSERT_TRUE(map);
  Fill(map->data(), 4);
  ASSERT_EQ(::truncate(("/dev/shm" + name).c_str(), 4096), 0);
  json reply = client.Call(ShmClient::Infer(1, "identity", token, 0, kBytes));
  EXPECT_EQ(reply.value("code", ""), "INVALID_ARGUMENT") << reply.dump();
  EXPECT_NE(reply.value("message", "").find("the region shrank to 4096 bytes"), std::string::npos)
      << reply.dump();
  // The farm is unharmed: the worker never touched the region, the next client is served.
  ShmClient other(farm.endpoint());
  auto [good_token, good_name, good] = other.Create(2 * kBytes);
  ASSERT_TRUE(good);
  Fill(good->data(), 5);
  reply = other.Call(ShmClient::Infer(2, "identity", good_token, 0, kBytes));
  EXPECT_EQ(reply.value("status", ""), "ok") << reply.dump();
  EXPECT_EQ(std::memcmp(good->data(), good->data() + kBytes, kBytes), 0);
  json stats = farm.Admin("stats");
  EXPECT_EQ(stats["workers"][0]["restarts"], 0);
  EXPECT_EQ(farm.Stop(), 0);
}

// Issue 35: truncated while the worker runs the request in place. The worker writes the outputs
// into the region after forward(); it must not die of SIGBUS there, only fail that request.
TEST(ClientShm, ARegionTruncatedWhileItsRequestRunsFailsItAndTheWorkerLivesOn) {
  Farm farm(json::array({Model("slow", 1)}));
  ASSERT_NO_FATAL_FAILURE(StartReady(farm));
  ShmClient client(farm.endpoint());
  auto [token, name, map] = client.Create(2 * kBytes);
  ASSERT_TRUE(map);
  Fill(map->data(), 8, /*first=*/10000);  // slow: about 0.4-1 s of matmuls
  const std::vector<pid_t> pids = farm.WorkerPids();
  client.Send(ShmClient::Infer(1, "slow", token, 0, kBytes));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // in forward() by now
  ASSERT_EQ(::truncate(("/dev/shm" + name).c_str(), 4096), 0);
  json reply = client.Receive();
  EXPECT_EQ(reply.value("code", ""), "INVALID_ARGUMENT") << reply.dump();
  EXPECT_NE(reply.value("message", "").find("holds 4096 bytes now"), std::string::npos)
      << reply.dump();
  // The same worker serves the next request.
  ShmClient other(farm.endpoint());
  auto [good_token, good_name, good] = other.Create(2 * kBytes);
  ASSERT_TRUE(good);
  Fill(good->data(), 9);
  reply = other.Call(ShmClient::Infer(2, "slow", good_token, 0, kBytes));
  EXPECT_EQ(reply.value("status", ""), "ok") << reply.dump();
  json stats = farm.Admin("stats");
  EXPECT_EQ(stats["workers"][0]["restarts"], 0) << stats["workers"].dump();
  EXPECT_EQ(farm.WorkerPids(), pids);
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(ClientShm, SupervisorExitRemovesEveryRegion) {
  Farm farm(json::array({Model("identity", 1)}));
  ASSERT_NO_FATAL_FAILURE(StartReady(farm));
  ShmClient client(farm.endpoint());
  Region a = client.Create(4096), b = client.Create(8192);
  const std::string first = a.name, second = b.name;
  ASSERT_TRUE(DevShmHas(first) && DevShmHas(second));
  EXPECT_EQ(farm.Stop(), 0);
  EXPECT_FALSE(DevShmHas(first));
  EXPECT_FALSE(DevShmHas(second));
}

}  // namespace
}  // namespace torchfarm::testing
