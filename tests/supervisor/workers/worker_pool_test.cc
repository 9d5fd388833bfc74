// WorkerPool without processes, on a fake clock: what a launch through the WorkerLauncher seam
// leaves behind (a starting slot, a fake pid, a real segment), launch pacing over loop turns,
// killing the silent and the hung, and a dead worker's segment released and replaced on relaunch.
// The launcher is the fake (tests/supervisor/fake_worker.h): no fork; kill() on its pids is ESRCH.
#include "supervisor/workers/worker_pool.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "ipc/control_protocol.h"
#include "tests/supervisor/fake_worker.h"

namespace torchfarm {
namespace {

using testing::FakeWorker;
using testing::FakeWorkerLauncher;
using testing::MakeReady;
using testing::SegmentExists;

constexpr char kWorkerBinary[] = "/nonexistent/torchfarm-worker";

ModelConfig TestModel() { return testing::SmallModel(); }

// A batch of one request of one row, as the dispatcher hands it to a slot.
InflightBatch OneRowBatch(uint64_t batch_id, TimePoint now) {
  PendingRequest request;
  request.inputs = {TensorSpec{DType::kFloat32, {1, 2}}};
  request.frames.emplace_back(2 * sizeof(float));
  request.slot_bytes = 64;
  request.received = now;
  InflightBatch batch;
  batch.batch_id = batch_id;
  batch.rows = 1;
  batch.dispatched = now;
  batch.requests.push_back(std::make_unique<PendingRequest>(std::move(request)));
  return batch;
}

class WorkerPoolTest : public ::testing::Test {
 protected:
  WorkerPoolTest() {
    LaunchContext context;
    context.worker_binary = kWorkerBinary;  // never executed
    context.control_endpoint = "ipc:///nonexistent/control";
    context.segment_prefix = prefix_;
    context.launcher = &launcher_;
    pool_.Configure(context, RestartPolicy{});
  }

  WorkerSlot& AddSlot() { return *pool_[pool_.Add(TestModel(), InstanceConfig{}, 0)]; }
  std::string SegmentOf(const WorkerSlot& slot) const {
    return prefix_ + "w" + std::to_string(slot.id()) + "." + std::to_string(slot.generation());
  }
  static Millis NoHangLimit(const WorkerSlot&) { return Millis(0); }

  const std::string prefix_ = testing::UniqueSegmentPrefix();
  FakeTimeSource clock_;
  FakeWorkerLauncher launcher_;
  WorkerPool pool_{clock_};
};

TEST_F(WorkerPoolTest, ALaunchStartsASlotWithAFakePidAndARealSegment) {
  WorkerSlot& slot = AddSlot();
  pool_.Launch(slot);

  EXPECT_EQ(slot.state(), SlotState::kStarting);
  EXPECT_EQ(slot.pid(), FakeWorkerLauncher::kFirstFakePid);
  EXPECT_EQ(slot.generation(), 0);
  EXPECT_EQ(slot.start_times().via, "fake");
  EXPECT_EQ(slot.start_times().launched, clock_.Now());
  errno = 0;
  EXPECT_EQ(::kill(slot.pid(), 0), -1);
  EXPECT_EQ(errno, ESRCH) << "a fake pid is never a process";
  EXPECT_EQ(pool_.FindByPid(slot.pid()), &slot);
  EXPECT_EQ(pool_.FindByRoutingId(ipc::WorkerRoutingId(0, 0)), &slot);

  ASSERT_EQ(launcher_.launches().size(), 1u);
  const testing::FakeLaunch& launch = launcher_.last();
  EXPECT_EQ(launch.pid, slot.pid());
  EXPECT_EQ(launch.at, clock_.Now());
  const ipc::WorkerLaunchArgs& args = launch.spec.args;
  EXPECT_EQ(args.worker_id, 0);
  EXPECT_EQ(args.generation, 0);
  EXPECT_EQ(args.model_name, "m");
  EXPECT_EQ(args.control_endpoint, "ipc:///nonexistent/control");
  EXPECT_EQ(args.segment, SegmentOf(slot));
  EXPECT_TRUE(SegmentExists(args.segment)) << args.segment;
  ASSERT_FALSE(launch.spec.argv.empty());
  EXPECT_EQ(launch.spec.argv[0], kWorkerBinary);
  EXPECT_TRUE(launch.spec.env.empty()) << "a CPU worker gets no MPS environment";
  // Both doorbells at the fds the arguments name, then the output pipe.
  ASSERT_EQ(launch.spec.fds.size(), 4u);
  EXPECT_EQ(launch.spec.fds[0].target, args.request_doorbell_fd);
  EXPECT_EQ(launch.spec.fds[1].target, args.response_doorbell_fd);
  EXPECT_EQ(launch.spec.fds[1].source, slot.response_fd());
  EXPECT_EQ(launch.spec.fds[2].target, STDOUT_FILENO);
  EXPECT_EQ(launch.spec.fds[3].target, STDERR_FILENO);
  EXPECT_TRUE(launch.request_doorbell.valid());
  EXPECT_TRUE(launch.response_doorbell.valid());

  // The worker side maps the same segment (magic, layout version and geometry checked).
  std::unique_ptr<FakeWorker> worker;
  const Status opened = FakeWorker::Open(launch, &worker);
  ASSERT_TRUE(opened.ok()) << opened.ToString();
  EXPECT_EQ(worker->pending(), 0u);
}

// The model's "optimize" reaches the worker's command line, and the worker reads it back; "none"
// stays off the command line.
TEST_F(WorkerPoolTest, TheModelsOptimizeSettingTravelsOnTheWorkersCommandLine) {
  for (const std::string optimize : {"none", "freeze", "inference"}) {
    ModelConfig model = TestModel();
    model.optimize = optimize;
    WorkerSlot& slot = *pool_[pool_.Add(model, InstanceConfig{}, 0)];
    pool_.Launch(slot);
    const testing::FakeLaunch& launch = launcher_.last();
    EXPECT_EQ(launch.spec.args.model_optimize, optimize);
    const std::vector<std::string>& argv = launch.spec.argv;
    const auto flag = std::find(argv.begin(), argv.end(), "--model-optimize");
    if (optimize == "none") {
      EXPECT_EQ(flag, argv.end());
    } else {
      ASSERT_NE(flag, argv.end());
      ASSERT_NE(flag + 1, argv.end());
      EXPECT_EQ(*(flag + 1), optimize);
    }
    std::vector<char*> raw;
    for (const std::string& arg : argv) raw.push_back(const_cast<char*>(arg.c_str()));
    ipc::WorkerLaunchArgs parsed;
    const Status status =
        ipc::WorkerLaunchArgs::Parse(static_cast<int>(raw.size()), raw.data(), &parsed);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(parsed.model_optimize, optimize);
  }
}

TEST_F(WorkerPoolTest, LaunchesBeyondTheTurnsBudgetAreDeferredToTheNextTurns) {
  constexpr int kSlots = 2 * WorkerPool::kMaxLaunchesPerTurn + 2;
  for (int i = 0; i < kSlots; ++i) AddSlot();
  for (int i = 0; i < kSlots; ++i) pool_.Launch(*pool_[i]);

  auto count = [&](SlotState state) {
    int n = 0;
    for (const auto& slot : pool_) n += slot->state() == state;
    return n;
  };
  EXPECT_EQ(launcher_.launches().size(), size_t{WorkerPool::kMaxLaunchesPerTurn});
  EXPECT_EQ(count(SlotState::kStarting), WorkerPool::kMaxLaunchesPerTurn);
  EXPECT_EQ(count(SlotState::kBackoff), kSlots - WorkerPool::kMaxLaunchesPerTurn);
  for (int i = WorkerPool::kMaxLaunchesPerTurn; i < kSlots; ++i) {
    EXPECT_EQ(pool_[i]->pid(), -1) << i;
    EXPECT_EQ(pool_[i]->restart_at(), clock_.Now()) << i << ": due at the next turn";
    EXPECT_EQ(pool_[i]->restarts(), 0) << i << ": a deferral is not a failure";
  }

  pool_.LaunchDue();  // the next turn, at the same instant
  EXPECT_EQ(launcher_.launches().size(), size_t{2 * WorkerPool::kMaxLaunchesPerTurn});
  EXPECT_EQ(count(SlotState::kStarting), 2 * WorkerPool::kMaxLaunchesPerTurn);
  pool_.LaunchDue();
  EXPECT_EQ(launcher_.launches().size(), size_t{kSlots});
  EXPECT_EQ(count(SlotState::kStarting), kSlots);
  for (int i = 0; i < kSlots; ++i) {
    EXPECT_EQ(pool_[i]->pid(), FakeWorkerLauncher::kFirstFakePid + i) << "launched in slot order";
    EXPECT_TRUE(SegmentExists(SegmentOf(*pool_[i]))) << i;
  }
}

TEST_F(WorkerPoolTest, KillUnresponsiveKillsASlotSilentPastItsHeartbeatLimit) {
  WorkerSlot& slot = AddSlot();
  pool_.Launch(slot);
  MakeReady(slot, clock_.Now());
  ASSERT_EQ(slot.state(), SlotState::kReady);
  const TimePoint heard = clock_.Now();
  const Clock::duration limit = WorkerPool::HeartbeatLimit(slot);
  EXPECT_EQ(limit, Millis(1'000) * ipc::kLivenessHeartbeats);

  clock_.Advance(limit);
  pool_.KillUnresponsive(NoHangLimit);
  EXPECT_EQ(slot.last_heard(), heard) << "silent exactly the limit: not killed";

  clock_.Advance(Millis(1));
  pool_.KillUnresponsive(NoHangLimit);
  EXPECT_EQ(slot.last_heard(), clock_.Now()) << "killed: OnKillSent restarts the silence clock";
  EXPECT_EQ(slot.state(), SlotState::kReady) << "until the exit arrives";
  EXPECT_EQ(slot.NextDeadline(limit, Millis(0)), clock_.Now() + limit + Micros(1))
      << "one kill per silence";

  slot.OnExit(SIGKILL, clock_.Now(), pool_.policy(), /*shutting_down=*/false);
  EXPECT_EQ(slot.last_exit(), "worker hung: no heartbeat for 3001 ms (killed by SIGKILL)");
  EXPECT_EQ(slot.state(), SlotState::kBackoff);
}

TEST_F(WorkerPoolTest, KillUnresponsiveKillsASlotWhoseBatchRunsPastTheHangLimit) {
  WorkerSlot& slot = AddSlot();
  pool_.Launch(slot);
  MakeReady(slot, clock_.Now());
  InflightBatch batch = OneRowBatch(7, clock_.Now());
  ASSERT_TRUE(slot.Dispatch(batch));
  const auto hang_limit = [](const WorkerSlot&) { return Millis(500); };

  clock_.Advance(Millis(500));
  slot.OnMessage(clock_.Now());  // heartbeats keep coming: it is the batch that hangs
  pool_.KillUnresponsive(hang_limit);
  EXPECT_EQ(slot.NextDeadline(WorkerPool::HeartbeatLimit(slot), Millis(500)),
            clock_.Now() + Micros(1))
      << "not killed yet: the hang deadline is next";

  clock_.Advance(Millis(1));
  slot.OnMessage(clock_.Now());
  pool_.KillUnresponsive(hang_limit);
  const std::vector<InflightBatch> orphans =
      slot.OnExit(SIGKILL, clock_.Now(), pool_.policy(), /*shutting_down=*/false);
  EXPECT_EQ(slot.last_exit(),
            "worker hung: batch ran longer than hang_timeout_ms (500 ms) (killed by SIGKILL)");
  ASSERT_EQ(orphans.size(), 1u);
  EXPECT_EQ(orphans[0].batch_id, 7u) << "the hung batch goes back to the caller for requeueing";
}

TEST_F(WorkerPoolTest, AnExitReleasesTheSegmentAndTheRelaunchGetsAFreshOne) {
  WorkerSlot& slot = AddSlot();
  pool_.Launch(slot);
  MakeReady(slot, clock_.Now());
  const pid_t first_pid = slot.pid();
  const std::string first_segment = SegmentOf(slot);
  ASSERT_TRUE(SegmentExists(first_segment));

  const std::vector<InflightBatch> orphans =
      slot.OnExit(SIGKILL, clock_.Now(), pool_.policy(), /*shutting_down=*/false);
  EXPECT_TRUE(orphans.empty());
  EXPECT_FALSE(SegmentExists(first_segment)) << first_segment;
  EXPECT_EQ(slot.pid(), -1);
  EXPECT_EQ(slot.responses(), nullptr);
  EXPECT_EQ(pool_.FindByPid(first_pid), nullptr);
  EXPECT_EQ(slot.state(), SlotState::kBackoff);
  EXPECT_GT(slot.restart_at(), clock_.Now());
  EXPECT_TRUE(pool_.AllExited());

  pool_.LaunchDue();
  EXPECT_EQ(launcher_.launches().size(), 1u) << "backing off";
  clock_.Advance(slot.restart_at() - clock_.Now());
  pool_.LaunchDue();
  ASSERT_EQ(launcher_.launches().size(), 2u);
  EXPECT_EQ(slot.state(), SlotState::kStarting);
  EXPECT_EQ(slot.generation(), 1);
  EXPECT_EQ(slot.pid(), FakeWorkerLauncher::kFirstFakePid + 1);
  EXPECT_EQ(launcher_.last().spec.args.segment, SegmentOf(slot));
  EXPECT_NE(SegmentOf(slot), first_segment);
  EXPECT_TRUE(SegmentExists(SegmentOf(slot)));
  EXPECT_FALSE(SegmentExists(first_segment));
}

TEST_F(WorkerPoolTest, AFailedStartBacksOffWithoutASegmentAndIsRetried) {
  WorkerSlot& slot = AddSlot();
  launcher_.FailNext(Internal("fork: Resource temporarily unavailable"));
  pool_.Launch(slot);
  EXPECT_EQ(slot.state(), SlotState::kBackoff);
  EXPECT_EQ(slot.pid(), -1);
  EXPECT_TRUE(launcher_.launches().empty());
  EXPECT_NE(slot.failure_reason().find("fork: Resource temporarily unavailable"), std::string::npos)
      << slot.failure_reason();
  EXPECT_FALSE(SegmentExists(prefix_ + "w0.0")) << "the segment went with the failed launch";

  clock_.Advance(slot.restart_at() - clock_.Now());
  pool_.LaunchDue();
  EXPECT_EQ(slot.state(), SlotState::kStarting);
  EXPECT_EQ(slot.generation(), 1);
  EXPECT_TRUE(SegmentExists(SegmentOf(slot)));
}

}  // namespace
}  // namespace torchfarm
