// Two supervisors on two "hosts" (network namespaces, tests/multihost/netns_topology.h) and a
// MultiClient in a third, under load: both hosts serve; killing one supervisor loses no request;
// restarting it puts it back into rotation; cutting its link behaves like a dead host and
// restoring the link brings it back. Skips when it may not create network namespaces.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "../integration/farm_fixture.h"
#include "netns_topology.h"
#include "supervisor/loop/run_dir_lock.h"
#include "torchfarm/multi_client.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

constexpr int kPort = 5555;
constexpr int kInFlight = 16;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// One supervisor inside a host namespace: `ip netns exec NS torchfarm-supervisor --config …`
// (ip execs the supervisor, so the pid is the supervisor's). Admin goes over an ipc socket file,
// which the test reaches from any namespace; jobs go over tcp://<host address>:5555 only.
class HostFarm {
 public:
  HostFarm(std::string ns, std::string address, const std::string& dir)
      : ns_(std::move(ns)), address_(std::move(address)), dir_(dir) {
    std::filesystem::create_directories(dir_ + "/run");
  }
  ~HostFarm() { Kill(); }

  std::string endpoint() const { return "tcp://" + address_ + ":" + std::to_string(kPort); }
  std::string log() const { return ReadFile(dir_ + "/supervisor.log"); }

  // Starts the supervisor and waits until it is ready; false with the log on failure.
  bool Start() {
    for (int attempt = 0; attempt < 2; ++attempt) {
      WriteConfig();
      Launch();
      if (WaitReady()) return true;
      if (insecure_ && log().find("unknown key 'insecure'") != std::string::npos) {
        // TODO(insecure): the supervisor of this tree does not know "insecure" yet (the CURVE
        // change adds it and then refuses non-loopback TCP binds without it). Run without it.
        std::cerr << "NOTE: supervisor rejects \"insecure\"; retrying without it\n";
        insecure_ = false;
        Kill();
        continue;
      }
      return false;
    }
    return false;
  }

  // Requests the supervisor has accepted so far (admin stats), or -1 without an answer.
  int64_t Requests() const {
    zmq::context_t context(1);
    zmq::socket_t admin(context, zmq::socket_type::req);
    admin.set(zmq::sockopt::linger, 0);
    admin.connect("ipc://" + dir_ + "/admin.sock");
    admin.send(zmq::str_buffer(R"({"cmd": "stats"})"), zmq::send_flags::dontwait);
    zmq::pollitem_t item{admin.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(2000));
    zmq::message_t reply;
    if (!(item.revents & ZMQ_POLLIN) || !admin.recv(reply)) return -1;
    json stats = json::parse(reply.to_string(), nullptr, false);
    if (!stats.is_object() || !stats.contains("models")) return -1;
    return stats["models"][0].value("requests", int64_t{-1});
  }

  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);  // its workers follow (PR_SET_PDEATHSIG)
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    RemoveStaleFiles(dir_ + "/run");  // the killed supervisor's /dev/shm segments
  }

 private:
  void WriteConfig() {
    json config = {
        {"endpoint", endpoint()},
        {"admin_endpoint", "ipc://" + dir_ + "/admin.sock"},
        {"run_dir", dir_ + "/run"},
        {"heartbeat_ms", 200},
        {"drain_timeout_ms", 500},
        {"models",
         json::array(
             {{{"name", "identity"},
               {"path", ModelDir() + "/identity.pt"},
               {"inputs", json::array({{{"dtype", "float32"}, {"shape", {-1, -1}}}})},
               {"instances", json::array({{{"device", "cpu"}, {"count", 1}, {"threads", 1}}})}}})}};
    // Every bind here is a non-loopback TCP address without CURVE, which the supervisor accepts
    // only when the config says so.
    if (insecure_) config["insecure"] = true;
    std::ofstream(dir_ + "/config.json") << config.dump(2);
  }

  void Launch() {
    const std::string log_path = dir_ + "/supervisor.log";
    const std::string binary = BinDir() + "/torchfarm-supervisor";
    const std::string config = dir_ + "/config.json";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a crashed test leaves no supervisor behind
      std::freopen(log_path.c_str(), "a", stdout);
      std::freopen(log_path.c_str(), "a", stderr);
      ::execlp("ip", "ip", "netns", "exec", ns_.c_str(), binary.c_str(), "--config", config.c_str(),
               static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }

  bool WaitReady() {
    zmq::context_t context(1);
    const auto give_up = SteadyClock::now() + std::chrono::seconds(30);
    while (SteadyClock::now() < give_up) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      zmq::socket_t admin(context, zmq::socket_type::req);
      admin.set(zmq::sockopt::linger, 0);
      admin.connect("ipc://" + dir_ + "/admin.sock");
      admin.send(zmq::str_buffer(R"({"cmd": "health"})"), zmq::send_flags::dontwait);
      zmq::pollitem_t item{admin.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(200));
      zmq::message_t reply;
      if ((item.revents & ZMQ_POLLIN) && admin.recv(reply) &&
          json::parse(reply.to_string(), nullptr, false).value("ready", false)) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  std::string ns_;
  std::string address_;
  std::string dir_;
  bool insecure_ = true;
  pid_t pid_ = -1;
};

// Keeps kInFlight identity requests in flight until `stop` says so; every request must come
// back ok with its own value (none lost, none mixed up). Returns how many completed.
int RunLoad(MultiClient& client, const std::function<bool(int done)>& stop, int max_seconds) {
  std::map<uint64_t, float> in_flight;
  int sent = 0, done = 0;
  const auto give_up = SteadyClock::now() + std::chrono::seconds(max_seconds);
  while (!stop(done)) {
    if (SteadyClock::now() > give_up) {
      ADD_FAILURE() << "load phase did not finish in " << max_seconds << " s";
      break;
    }
    while (in_flight.size() < kInFlight) {
      std::vector<float> x = {static_cast<float>(sent), 1.0f, 2.0f, 3.0f};
      TensorView view{{DType::kFloat32, {1, 4}}, x.data(), x.size() * sizeof(float)};
      uint64_t id = 0;
      Status s = client.Send("identity", {view}, {}, &id);
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (!s.ok()) return done;
      in_flight[id] = static_cast<float>(sent++);
    }
    InferResult result;
    uint64_t id = 0;
    Status s = client.Receive(&result, &id, 30000);
    EXPECT_TRUE(s.ok()) << "request " << id << ": " << s.ToString();
    if (id == 0) return done;
    float first = -1;
    if (s.ok() && !result.outputs.empty()) std::memcpy(&first, result.outputs[0].data.data(), 4);
    EXPECT_EQ(first, in_flight[id]) << "request " << id;
    in_flight.erase(id);
    ++done;
  }
  // Drain what is still in flight: those must succeed too.
  while (!in_flight.empty()) {
    InferResult result;
    uint64_t id = 0;
    Status s = client.Receive(&result, &id, 30000);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (id == 0) break;
    in_flight.erase(id);
    ++done;
  }
  return done;
}

class MultihostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!topology_.Create(2)) {
      GTEST_SKIP() << "cannot build the network namespaces (needs root: CAP_SYS_ADMIN and "
                      "CAP_NET_ADMIN, and iproute2): "
                   << topology_.why();
    }
    dir_ = "/tmp/tf-multihost-" + std::to_string(::getpid());
    for (int h = 0; h < 2; ++h) {
      hosts_.push_back(std::make_unique<HostFarm>(topology_.host_ns(h), topology_.host_address(h),
                                                  dir_ + "/host" + std::to_string(h)));
    }
  }
  void TearDown() override {
    if (HasFailure()) {
      for (auto& host : hosts_)
        std::cerr << "---- " << host->endpoint() << " ----\n" << host->log();
    }
    hosts_.clear();
    topology_.LeaveClientNamespace();
    std::filesystem::remove_all(dir_);
  }

  EndpointStatus StatusOf(const MultiClient& client, int host) {
    return client.endpoint_status()[host];
  }

  NetnsTopology topology_;
  std::string dir_;
  std::vector<std::unique_ptr<HostFarm>> hosts_;
};

TEST_F(MultihostTest, SpreadsSurvivesDeathAndLinkCutAndReadmits) {
  const auto start = SteadyClock::now();
  for (auto& host : hosts_) ASSERT_TRUE(host->Start()) << host->log();
  const auto ready = SteadyClock::now();
  ASSERT_TRUE(topology_.EnterClientNamespace()) << topology_.why();

  MultiClientOptions options;
  options.io_timeout_ms = 20000;
  options.heartbeat_ms = 200;
  options.eject_after_ms = 1000;
  options.probe_backoff_ms = 200;
  options.max_probe_backoff_ms = 1000;
  MultiClient client({hosts_[0]->endpoint(), hosts_[1]->endpoint()}, options);
  ASSERT_TRUE(client.connect_status().ok());

  // 1. Both hosts serve.
  // (Not a fixed count: the first requests of a host warm its worker up, and least-outstanding
  // spreading rightly sends the other host more meanwhile.)
  RunLoad(
      client,
      [&](int) { return StatusOf(client, 0).results >= 100 && StatusOf(client, 1).results >= 100; },
      15);
  EXPECT_GE(StatusOf(client, 0).results, 100u);
  EXPECT_GE(StatusOf(client, 1).results, 100u);

  // 2. Host 0's supervisor dies under load: nothing is lost, it is ejected.
  bool killed = false;
  RunLoad(
      client,
      [&](int done) {
        if (!killed && done >= 100) {
          hosts_[0]->Kill();
          killed = true;
        }
        return done >= 400;
      },
      20);
  EXPECT_TRUE(killed);
  EXPECT_FALSE(StatusOf(client, 0).live);
  EXPECT_GE(StatusOf(client, 0).ejections, 1u);

  // 3. It comes back: probes put it back into rotation and it serves again.
  ASSERT_TRUE(hosts_[0]->Start()) << hosts_[0]->log();
  const uint64_t before_restart = StatusOf(client, 0).results;
  RunLoad(
      client, [&](int) { return StatusOf(client, 0).results >= before_restart + 50; }, 15);
  EXPECT_TRUE(StatusOf(client, 0).live);
  EXPECT_GE(StatusOf(client, 0).readmissions, 1u);

  // 4. Its cable is cut under load: like a dead host. Restored: back into rotation.
  const uint64_t ejections = StatusOf(client, 0).ejections;
  bool cut = false;
  RunLoad(
      client,
      [&](int done) {
        if (!cut && done >= 100) cut = topology_.SetLink(0, false);
        return done >= 400;
      },
      20);
  EXPECT_TRUE(cut) << topology_.why();
  EXPECT_EQ(StatusOf(client, 0).ejections, ejections + 1);
  ASSERT_TRUE(topology_.SetLink(0, true)) << topology_.why();
  const uint64_t before_restore = StatusOf(client, 0).results;
  RunLoad(
      client, [&](int) { return StatusOf(client, 0).results >= before_restore + 50; }, 15);
  EXPECT_TRUE(StatusOf(client, 0).live);

  const auto ms = [](auto d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  std::cerr << "multihost: farms ready in " << ms(ready - start) << " ms, whole test "
            << ms(SteadyClock::now() - start) << " ms\n";
  for (const auto& s : client.endpoint_status()) {
    std::cerr << "  " << s.endpoint << " sent " << s.sent << " results " << s.results
              << " ejections " << s.ejections << " readmissions " << s.readmissions << "\n";
  }
}

// The Python clients, run in the client namespace, spread over both hosts and get every answer
// right with one host's cable cut.
TEST_F(MultihostTest, PythonClientsSpreadAndSurviveALinkCut) {
  if (std::system(TORCHFARM_PYTHON " -c 'import zmq, numpy' 2>/dev/null") != 0) {
    GTEST_SKIP() << TORCHFARM_PYTHON " cannot import zmq and numpy (tools/install-deps.sh)";
  }
  for (auto& host : hosts_) ASSERT_TRUE(host->Start()) << host->log();
  const std::string run = "ip netns exec " + topology_.client_ns() +
                          " env PYTHONPATH=" + std::string(TORCHFARM_SOURCE_DIR) +
                          "/clients/python " TORCHFARM_PYTHON " " + TORCHFARM_SOURCE_DIR +
                          "/tests/multihost/python_client_check.py ";
  const std::string endpoints = hosts_[0]->endpoint() + " " + hosts_[1]->endpoint();
  const int64_t before0 = hosts_[0]->Requests(), before1 = hosts_[1]->Requests();
  ASSERT_EQ(std::system((run + "200 " + endpoints).c_str()), 0);
  EXPECT_GE(hosts_[0]->Requests() - before0, 50) << "host 0 served its share";
  EXPECT_GE(hosts_[1]->Requests() - before1, 50) << "host 1 served its share";

  ASSERT_TRUE(topology_.SetLink(0, false)) << topology_.why();
  const int64_t cut1 = hosts_[1]->Requests();
  ASSERT_EQ(std::system((run + "100 " + endpoints).c_str()), 0) << "with host 0 cut off";
  EXPECT_GE(hosts_[1]->Requests() - cut1, 200) << "host 1 answered everything";
  ASSERT_TRUE(topology_.SetLink(0, true)) << topology_.why();
}

}  // namespace
}  // namespace torchfarm::testing
