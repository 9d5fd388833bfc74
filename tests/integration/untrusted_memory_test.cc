// Issue 35: workers are untrusted writers of their shared memory. With the real binaries, a
// worker's response_head is set 2^40 past its tail (as a buggy or compromised worker could) and
// the worker dies: the supervisor must not spin on the ring. Another model keeps being served
// within 100 ms throughout, the admin socket answers, the corrupt worker is killed (when alive),
// counted (stats and Prometheus) and restarted, and its accepted request is answered.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "farm_fixture.h"
#include "ipc/shm_layout.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;
using Steady = std::chrono::steady_clock;

constexpr int kWidth = 16;  // identity.pt: float32 [-1, 16]

Status InferIdentity(Client& client, const std::string& model) {
  std::vector<float> x(kWidth, 1.5f);
  InferResult result;
  Status s =
      client.Infer(model, {{{DType::kFloat32, {1, kWidth}}, x.data(), x.size() * 4}}, &result);
  if (!s.ok()) return s;
  if (result.outputs.size() != 1 || result.outputs[0].data.size() != x.size() * 4 ||
      std::memcmp(result.outputs[0].data.data(), x.data(), x.size() * 4) != 0) {
    return Internal("output differs from the input");
  }
  return Status::Ok();
}

// The stats entry of `model`'s (only) worker, or null.
json WorkerOf(const Farm& farm, const std::string& model) {
  json stats = farm.Admin("stats");
  if (!stats.is_object()) return nullptr;
  for (const auto& w : stats["workers"]) {
    if (w.value("model", "") == model) return w;
  }
  return nullptr;
}

// The name of the worker segment process `pid` maps ("...-w<id>.<generation>" in /dev/shm; a
// worker forked from the zygote has the zygote's command line, so its maps are read instead).
std::string SegmentOf(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  const std::regex segment(R"(/dev/shm/(\S+-w\d+\.\d+)$)");
  std::string line;
  std::smatch match;
  while (std::getline(maps, line)) {
    if (std::regex_search(line, match, segment)) return match[1];
  }
  return "";
}

// Maps the header of a worker's segment, as a worker (or root) could write it.
class SegmentHeaderMap {
 public:
  explicit SegmentHeaderMap(const std::string& name) {
    const int fd = ::open(("/dev/shm/" + name).c_str(), O_RDWR);
    if (fd < 0) return;
    void* p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p != MAP_FAILED) header_ = static_cast<ipc::SegmentHeader*>(p);
  }
  ~SegmentHeaderMap() {
    if (header_) ::munmap(header_, kBytes);
  }
  ipc::SegmentHeader* get() const { return header_; }

 private:
  static constexpr size_t kBytes = 4096;
  ipc::SegmentHeader* header_ = nullptr;
};

// Requests to `model` from their own client, timed, until stopped.
class Prober {
 public:
  Prober(const std::string& endpoint, const std::string& model)
      : thread_([this, endpoint, model] {
          Client client(endpoint, 5'000);
          while (!stop_) {
            const auto started = Steady::now();
            const Status s = InferIdentity(client, model);
            const auto took = Steady::now() - started;
            if (!s.ok()) ++failed_;
            ++answered_;
            const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(took).count();
            if (us > slowest_us_) slowest_us_ = us;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
        }) {}
  ~Prober() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int answered() const { return answered_; }
  int failed() const { return failed_; }
  int64_t slowest_us() const { return slowest_us_; }
  // From now on: the first requests of a fresh client and worker are not what is measured.
  void ResetSlowest() { slowest_us_ = 0; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> answered_{0}, failed_{0};
  std::atomic<int64_t> slowest_us_{0};
  std::thread thread_;
};

bool WaitFor(const std::function<bool()>& done, int timeout_ms = 30'000) {
  const auto until = Steady::now() + std::chrono::milliseconds(timeout_ms);
  while (Steady::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

class UntrustedMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    metrics_port_ = FreePort();
    json extra = {{"metrics_endpoint", "127.0.0.1:" + std::to_string(metrics_port_)}};
    farm_ =
        std::make_unique<Farm>(json::array({ModelEntry("bad", "identity.pt", {-1, kWidth}, 1),
                                            ModelEntry("good", "identity.pt", {-1, kWidth}, 1)}),
                               extra);
    ASSERT_TRUE(farm_->Start());
    ASSERT_TRUE(farm_->WaitReady()) << farm_->error();
  }
  // Waits for `bad`'s worker to be ready in a new process after `old_pid`, with `violations`.
  void ExpectRestarted(pid_t old_pid, int violations) {
    json worker;
    ASSERT_TRUE(WaitFor([&] {
      worker = WorkerOf(*farm_, "bad");
      return worker.is_object() && worker["state"] == "ready" && worker["pid"] != old_pid;
    })) << worker.dump();
    EXPECT_EQ(worker["protocol_violations"], violations) << worker.dump();
    EXPECT_NE(worker["last_exit"].get<std::string>().find("protocol violation: response_head"),
              std::string::npos)
        << worker.dump();
    json stats = farm_->Admin("stats");
    EXPECT_EQ(stats["supervisor"]["worker_protocol_violations"], violations);
    const std::string metrics = HttpGet(metrics_port_, "/metrics");
    EXPECT_EQ(MetricValue(metrics,
                          "torchfarm_worker_protocol_violations_total{model=\"bad\","
                          "version=\"1\"}"),
              violations)
        << metrics;
  }

  int metrics_port_ = 0;
  std::unique_ptr<Farm> farm_;
};

TEST_F(UntrustedMemory, AResponseHeadFarPastItsTailFromADeadWorkerCostsOnlyThatWorker) {
  const json worker = WorkerOf(*farm_, "bad");
  ASSERT_TRUE(worker.is_object());
  const pid_t pid = worker["pid"].get<pid_t>();
  SegmentHeaderMap header(SegmentOf(pid));
  ASSERT_NE(header.get(), nullptr) << "cannot map the segment of worker " << pid;
  Prober good(farm_->endpoint(), "good");
  ASSERT_TRUE(WaitFor([&] { return good.answered() >= 3; }));

  // The issue's case: response_head 2^40 past the tail, then the worker dies.
  const uint64_t tail = header.get()->response_tail.value.load();
  header.get()->response_head.value.store(tail + (uint64_t{1} << 40));
  good.ResetSlowest();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  const auto killed = Steady::now();
  const int before = good.answered();
  ASSERT_TRUE(WaitFor([&] { return good.answered() >= before + 20; }, 10'000))
      << "the other model stopped being served";
  const auto admin_started = Steady::now();
  json health = farm_->Admin("health", 1'000);
  EXPECT_TRUE(health.is_object()) << "the admin socket did not answer within 1 s";
  EXPECT_LT(Steady::now() - admin_started, std::chrono::milliseconds(1'000));
  ExpectRestarted(pid, 1);
  good.Stop();
  EXPECT_EQ(good.failed(), 0);
  EXPECT_LT(good.slowest_us(), 100'000)
      << "the other model waited too long after the kill at "
      << std::chrono::duration_cast<std::chrono::milliseconds>(Steady::now() - killed).count()
      << " ms ago";
  Client client(farm_->endpoint(), 10'000);
  EXPECT_TRUE(InferIdentity(client, "bad").ok()) << "the restarted worker serves";
  EXPECT_TRUE(farm_->Running()) << farm_->error();
}

TEST_F(UntrustedMemory,
       ALiveWorkerThatPublishesMoreResponsesThanBatchesIsKilledAndItsJobRunsAgain) {
  const json worker = WorkerOf(*farm_, "bad");
  ASSERT_TRUE(worker.is_object());
  const pid_t pid = worker["pid"].get<pid_t>();
  SegmentHeaderMap header(SegmentOf(pid));
  ASSERT_NE(header.get(), nullptr) << "cannot map the segment of worker " << pid;
  Prober good(farm_->endpoint(), "good");

  ASSERT_TRUE(WaitFor([&] { return good.answered() >= 3; }));
  good.ResetSlowest();
  // One response for nothing; the worker's next real response makes it two for one batch.
  header.get()->response_head.value.fetch_add(1);
  Client client(farm_->endpoint(), 30'000);
  const Status answer = InferIdentity(client, "bad");
  EXPECT_TRUE(answer.ok()) << "the accepted request runs again on the restarted worker: "
                           << answer.ToString();
  ExpectRestarted(pid, 1);
  good.Stop();
  EXPECT_EQ(good.failed(), 0);
  EXPECT_LT(good.slowest_us(), 100'000);
  EXPECT_TRUE(farm_->Running()) << farm_->error();
}

}  // namespace
}  // namespace torchfarm::testing
