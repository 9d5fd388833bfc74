// The supervisor's resource limits without processes: the accept decision, the shared-memory
// budget, the derived max_connections, the counted and rate-limited resource errors, and the job
// socket's connection monitor against real in-process ZeroMQ sockets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "ipc/control_protocol.h"
#include "supervisor/intake/shm_budget.h"
#include "supervisor/loop/resource_errors.h"
#include "supervisor/security/accept_guard.h"
#include "supervisor/security/connection_monitor.h"
#include "supervisor/security/descriptor_limit.h"
#include "supervisor/workers/restart_policy.h"
#include "supervisor/workers/worker_slot.h"

namespace torchfarm {
namespace {

using ::testing::HasSubstr;

int HighestOpenDescriptor() {
  int highest = -1;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return highest;
  const int own = ::dirfd(dir);
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd != own) highest = std::max(highest, fd);
  }
  ::closedir(dir);
  return highest;
}

TEST(AcceptDecisionTest, TheJobSocketServesAtMostMaxConnections) {
  EXPECT_EQ(DecideAccept(10, true, false, 0, 2, 256), AcceptVerdict::kKeep);
  EXPECT_EQ(DecideAccept(10, true, false, 1, 2, 256), AcceptVerdict::kKeep);
  EXPECT_EQ(DecideAccept(10, true, false, 2, 2, 256), AcceptVerdict::kRefuseMaxConnections);
  EXPECT_EQ(DecideAccept(10, true, false, 5, 0, 256), AcceptVerdict::kKeep) << "0: no cap";
  EXPECT_EQ(DecideAccept(10, false, false, 5, 2, 256), AcceptVerdict::kKeep)
      << "other listeners are not counted against the job socket";
}

TEST(AcceptDecisionTest, TheLastDescriptorsAreKeptForAdminAndWorkers) {
  const int limit = 256;
  const int first_reserved = limit - kDescriptorReserve;
  EXPECT_EQ(DecideAccept(first_reserved - 1, false, false, 0, 0, limit), AcceptVerdict::kKeep);
  EXPECT_EQ(DecideAccept(first_reserved, false, false, 0, 0, limit), AcceptVerdict::kRefuseReserve);
  EXPECT_EQ(DecideAccept(first_reserved, true, false, 0, 100, limit),
            AcceptVerdict::kRefuseReserve);
  // A Unix-domain connection (admin, control) is what the reserve is kept for.
  EXPECT_EQ(DecideAccept(limit - 1, false, true, 0, 0, limit), AcceptVerdict::kKeep);
  // But an ipc:// job socket is still a job socket.
  EXPECT_EQ(DecideAccept(limit - 1, true, true, 0, 0, limit), AcceptVerdict::kRefuseReserve);
  EXPECT_EQ(DecideAccept(1'000'000, false, false, 0, 0, 0), AcceptVerdict::kKeep)
      << "an unknown limit reserves nothing";
}

TEST(AcceptGuardTest, EmfileOnAUnixListenerBecomesEnfileForLibzmq) {
  AcceptGuard guard;
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  int error = EMFILE;
  EXPECT_EQ(guard.Filter(pair[0], -1, &error), -1);
  EXPECT_EQ(error, ENFILE) << "libzmq 4.3's ipc listener aborts on EMFILE, waits on ENFILE";
  EXPECT_EQ(guard.accept_exhausted(), 1u);
  const int tcp = ::socket(AF_INET, SOCK_STREAM, 0);
  error = EMFILE;
  EXPECT_EQ(guard.Filter(tcp, -1, &error), -1);
  EXPECT_EQ(error, EMFILE) << "a TCP listener keeps its errno";
  error = EAGAIN;
  guard.Filter(tcp, -1, &error);
  EXPECT_EQ(guard.accept_exhausted(), 2u) << "EAGAIN is no exhaustion";
  ::close(tcp);
  ::close(pair[0]);
  ::close(pair[1]);
}

TEST(AcceptGuardTest, RefusedConnectionsAreClosedAndCounted) {
  AcceptGuard guard;
  guard.Configure(/*descriptor_limit=*/0, /*max_connections=*/1);
  guard.SetJobListener(100);
  int first[2], second[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, first), 0);
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, second), 0);
  int error = 0;
  EXPECT_EQ(guard.Filter(100, first[0], &error), first[0]);
  EXPECT_EQ(guard.job_connections(), 1);
  EXPECT_EQ(guard.Filter(100, second[0], &error), -1);
  EXPECT_EQ(error, ECONNABORTED);
  EXPECT_EQ(guard.refused_max_connections(), 1u);
  char byte;
  EXPECT_EQ(::recv(second[1], &byte, 1, 0), 0) << "the refused peer sees the connection closed";
  guard.JobConnectionClosed();
  guard.JobConnectionClosed();  // never below zero
  EXPECT_EQ(guard.job_connections(), 0);
  ::close(first[0]);
  ::close(first[1]);
  ::close(second[1]);
}

TEST(ShmBudgetTest, ReservationsFitTheLimitAndGiveTheirBytesBack) {
  ShmBudget budget(100);
  ShmBudget::Reservation a, b, c;
  ASSERT_TRUE(budget.Reserve(60, "worker 0 segment", &a).ok());
  ASSERT_TRUE(budget.Reserve(40, "shm_create", &b).ok());
  EXPECT_EQ(budget.used(), 100u);
  Status s = budget.Reserve(1, "worker 1 segment", &c);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "worker 1 segment: 1 bytes of shared memory do not fit: 100 of 100 bytes are in use "
            "(limits.max_shm_bytes)");
  EXPECT_EQ(budget.refused(), 1u);
  a.Release();
  EXPECT_EQ(budget.used(), 40u);
  { ShmBudget::Reservation moved = std::move(b); }
  EXPECT_EQ(budget.used(), 0u) << "a reservation gives its bytes back when destroyed";
  EXPECT_EQ(budget.Reserve(UINT64_MAX, "huge", &c).code(), StatusCode::kResourceExhausted)
      << "never wraps";
  ASSERT_TRUE(ShmBudget::Reserve(nullptr, UINT64_MAX, "no budget", &c).ok());
  EXPECT_EQ(c.bytes(), 0u);
  budget.set_limit(10);
  EXPECT_EQ(budget.Reserve(11, "after a reload", &c).code(), StatusCode::kResourceExhausted);
  EXPECT_GT(ShmBudget::FilesystemBytes("/dev/shm", 0), 0u);
  EXPECT_EQ(ShmBudget::FilesystemBytes("/no/such/dir", 7), 7u);
}

TEST(DescriptorLimitTest, MaxConnectionsLeavesAReserveForWorkersAndTheFrontEnd) {
  FarmConfig config;
  config.client_shm.enabled = false;
  EXPECT_EQ(DefaultMaxConnections(1024, 2, config),
            1024 - kBaseDescriptors - 2 * kDescriptorsPerWorker);
  config.client_shm.enabled = true;
  config.client_shm.max_regions = 64;
  EXPECT_EQ(DefaultMaxConnections(1024, 2, config),
            1024 - kBaseDescriptors - 2 * kDescriptorsPerWorker - 64);
  config.frontend.http_endpoint = "127.0.0.1:0";
  config.frontend.max_connections = 500;
  EXPECT_EQ(DefaultMaxConnections(4096, 2, config),
            4096 - kBaseDescriptors - 2 * kDescriptorsPerWorker - 64 - 500);
  EXPECT_EQ(DefaultMaxConnections(256, 2, config), kMinDerivedConnections)
      << "never below the floor";
  EXPECT_EQ(DefaultMaxConnections(INT64_MAX, 2, config), 1'000'000)
      << "nor above the config's bound";
  EXPECT_GT(OpenDescriptors(), 2);
  EXPECT_GT(CurrentDescriptorLimit(), 0);
}

TEST(ResourceErrorsTest, EachFailureIsCountedAndLoggedAtABoundedRate) {
  ResourceErrors errors;
  const TimePoint t0{};
  for (int i = 0; i < 1000; ++i) errors.Note("admin", "Too many open files", t0 + Millis(i));
  errors.Note("worker launch", "fork failed: Resource temporarily unavailable", t0);
  EXPECT_EQ(errors.counts().at("admin"), 1000u);
  EXPECT_EQ(errors.counts().at("worker launch"), 1u);
  EXPECT_EQ(errors.total(), 1001u);
  EXPECT_TRUE(IsResourceErrno(EMFILE) && IsResourceErrno(ENFILE) && IsResourceErrno(ENOMEM) &&
              IsResourceErrno(EAGAIN));
  EXPECT_FALSE(IsResourceErrno(EINVAL));
}

bool WaitUntil(ConnectionMonitor& monitor, const std::function<bool()>& done) {
  for (int i = 0; i < 500 && !done(); ++i) {
    monitor.HandleEvents();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// Without the binary's accept interposer, the monitor refuses beyond max_connections itself.
TEST(ConnectionMonitorTest, CountsConnectionsAndShutsDownThoseBeyondTheLimit) {
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  AcceptGuard guard;
  guard.Configure(0, 2);
  ConnectionMonitor monitor(guard);
  ASSERT_TRUE(monitor.Start(context, router, "test-job-connections").ok());
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  monitor.HandleEvents();
  std::vector<zmq::socket_t> clients;
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back(context, zmq::socket_type::dealer);
    clients.back().set(zmq::sockopt::linger, 0);
    clients.back().connect(endpoint);
  }
  ASSERT_TRUE(WaitUntil(monitor, [&] { return monitor.open() == 2; })) << monitor.open();
  clients.emplace_back(context, zmq::socket_type::dealer);
  clients.back().set(zmq::sockopt::linger, 0);
  clients.back().set(zmq::sockopt::reconnect_ivl, 60'000);  // once refused, stays away
  clients.back().connect(endpoint);
  ASSERT_TRUE(WaitUntil(monitor, [&] { return monitor.refused() >= 1 && monitor.open() == 2; }))
      << "open " << monitor.open() << " refused " << monitor.refused();
  clients.front().close();
  ASSERT_TRUE(WaitUntil(monitor, [&] { return monitor.open() == 1; })) << monitor.open();
  monitor.Report(TimePoint{} + Millis(1));
}

// A worker that could not map its segment (descriptors or memory ran out in the worker) is the
// machine's state: restarted like a kill, however often, never failed, even when it said so first.
TEST(ResourceExitTest, AWorkerThatCannotMapItsSegmentIsNeverFailed) {
  const int segment_exit = ipc::kExitSegment << 8;  // as waitpid reports exit(kExitSegment)
  ASSERT_TRUE(WIFEXITED(segment_exit) && WEXITSTATUS(segment_exit) == ipc::kExitSegment);
  EXPECT_EQ(ClassifyExit(segment_exit, false, false, /*reported_model_failure=*/true),
            ExitKind::kExternal);
  RestartPolicy policy;
  RestartHistory history;
  std::minstd_rand jitter(1);
  ExitFacts facts;
  facts.kind = ClassifyExit(segment_exit, false, false, true);
  TimePoint now{};
  for (int i = 0; i < 100; ++i) {
    RestartDecision d = DecideRestart(policy, facts, now, &history, &jitter);
    ASSERT_EQ(d.action, RestartDecision::Action::kRelaunch) << "exit " << i;
    now = d.at;
  }
  const int model_exit = ipc::kExitModelLoad << 8;
  EXPECT_EQ(ClassifyExit(model_exit, false, false, true), ExitKind::kStartFailure)
      << "a model that does not load is still a start failure";
}

// A launch that fails for want of descriptors (EMFILE) or of the shared-memory budget backs the
// slot off like any launch failure, never marks it failed, and succeeds once they are free again.
class ExhaustedLaunchTest : public ::testing::Test {
 protected:
  ExhaustedLaunchTest() : slot_(0, Model(), InstanceConfig{}, 0) {
    context_.segment_prefix = "torchfarm-test-" + std::to_string(::getpid()) + "-exhausted-";
    context_.worker_binary = "/bin/true";
    context_.shm_budget = &budget_;
  }
  static ModelConfig Model() {
    ModelConfig m;
    m.name = "m";
    m.path = "/nonexistent/model.pt";
    m.inputs = {TensorSpec{DType::kFloat32, {-1, 4}}};
    m.slot_bytes = 4096;
    m.ring_slots = 4;
    return m;
  }
  // Launches until one gets a process; each failure must leave the slot backing off.
  void ExpectBackoffThenLaunch(const std::function<void()>& free_resources) {
    for (int i = 0; i < 10; ++i) {
      Status s = slot_.Launch(context_, clock_.Now(), policy_);
      ASSERT_FALSE(s.ok()) << "launch " << i;
      ASSERT_EQ(slot_.state(), SlotState::kBackoff) << s.message();
      clock_.Advance(slot_.restart_at() - clock_.Now());
    }
    EXPECT_EQ(budget_.used(), 0u) << "a failed launch keeps no reservation";
    free_resources();
    ASSERT_TRUE(slot_.Launch(context_, clock_.Now(), policy_).ok());
    EXPECT_EQ(slot_.state(), SlotState::kStarting);
    EXPECT_GT(budget_.used(), 0u);
    int status = 0;
    ASSERT_EQ(::waitpid(slot_.pid(), &status, 0), slot_.pid());
    slot_.OnExit(status, clock_.Now(), policy_, /*shutting_down=*/true);
    EXPECT_EQ(budget_.used(), 0u) << "the segment's bytes come back with the process";
  }
  FakeTimeSource clock_;
  RestartPolicy policy_;
  ShmBudget budget_{0};
  LaunchContext context_;
  WorkerSlot slot_;
};

TEST_F(ExhaustedLaunchTest, OverTheShmBudgetBacksOffUntilItFits) {
  ExpectBackoffThenLaunch([&] { budget_.set_limit(uint64_t{1} << 30); });
  EXPECT_GE(budget_.refused(), 10u);
}

TEST_F(ExhaustedLaunchTest, OutOfDescriptorsBacksOffUntilTheyFree) {
#if defined(__SANITIZE_ADDRESS__)
  // The sanitizer runtimes need descriptors of their own: UBSan's vptr check opens a pipe to probe
  // memory, and with none left it reports every object as invalid. `make test` runs this test.
  GTEST_SKIP() << "needs a descriptor table without sanitizer runtimes";
#endif
  budget_.set_limit(uint64_t{1} << 30);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  // Room for the segment's shm_open, none for the doorbells' eventfds: every number up to the
  // highest open descriptor is taken (the test runner may have left holes), and the limit allows
  // one more.
  const int highest = HighestOpenDescriptor();
  ASSERT_GE(highest, 2);
  std::vector<int> fillers;
  for (;;) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    if (fd > highest) {
      ::close(fd);
      break;
    }
    fillers.push_back(fd);
  }
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(highest + 2);  // the fillers all lie below `highest`
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  ExpectBackoffThenLaunch([&] { ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0); });
  ::setrlimit(RLIMIT_NOFILE, &saved);
  for (int fd : fillers) ::close(fd);
  EXPECT_NE(slot_.failure_reason().find("launch failed"), std::string::npos);
}

}  // namespace
}  // namespace torchfarm
