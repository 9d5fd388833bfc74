// Dispatcher without processes, on a fake clock: batching of queued requests onto a ready worker,
// requeueing after a worker died (and the error after max_retries deaths), queue deadlines, and a
// batch failed INVALID_ARGUMENT run again request by request. The pool is real and launches
// through the fake launcher (tests/supervisor/fake_worker.h), so batches travel through real
// segments and doorbells and the test plays the worker; requests come from a DEALER client through
// a ROUTER socket and ParseJob, answers go back through ResponseHandler and ReplyWriter, and the
// client reads them.
#include "supervisor/dispatch/dispatcher.h"

#include <poll.h>
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <iterator>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/protocol.h"
#include "supervisor/dispatch/response_handler.h"
#include "supervisor/intake/job_intake.h"
#include "tests/supervisor/fake_worker.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using testing::FakeBatch;
using testing::FakeOutputs;
using testing::FakeWorker;
using testing::FakeWorkerLauncher;
using testing::MakeReady;

constexpr auto kReplyWait = std::chrono::milliseconds(1'000);
constexpr auto kNoReplyWait = std::chrono::milliseconds(10);

// One float32 input of two columns; batches of up to 4 rows wait 2 ms for company.
ModelConfig BatchingModel() {
  ModelConfig m = testing::SmallModel();
  m.max_batch_size = 4;
  m.max_queue_delay_us = 2'000;
  return m;
}

// Every batch of one request: requeued requests keep their place and their own batch.
ModelConfig UnbatchedModel() {
  ModelConfig m = BatchingModel();
  m.max_batch_size = 1;
  m.max_queue_delay_us = 0;
  return m;
}

// AddOne, except that a batch holding a negative value fails whole with INVALID_ARGUMENT, as a
// model that throws on one bad input fails its batch-mates with it.
FakeOutputs RejectNegatives(const FakeBatch& batch) {
  for (float v : batch.Values<float>(0)) {
    if (v < 0) return testing::FailWith(InvalidArgument("negative input"))(batch);
  }
  return testing::AddOne(batch);
}

bool Readable(int fd) {
  pollfd item{fd, POLLIN, 0};
  return ::poll(&item, 1, 0) == 1;
}

// A reply as the client reads it: the header and each output's float32 values.
struct Reply {
  ReplyHeader header;
  std::vector<std::vector<float>> values;
  std::string id() const { return header.id.is_string() ? header.id.get<std::string>() : ""; }
};

class DispatcherTest : public ::testing::Test {
 protected:
  DispatcherTest() {
    jobs_.set(zmq::sockopt::router_mandatory, 1);  // as the supervisor's job socket
    jobs_.set(zmq::sockopt::linger, 0);
    client_.set(zmq::sockopt::linger, 0);
    jobs_.bind("inproc://jobs");
    client_.connect("inproc://jobs");
    LaunchContext context;
    context.worker_binary = "/nonexistent/torchfarm-worker";  // never executed
    context.control_endpoint = "inproc://control";
    context.segment_prefix = testing::UniqueSegmentPrefix();
    context.launcher = &launcher_;
    pool_.Configure(context, RestartPolicy{});
  }

  // Serves `config` with `workers` slots, launched (kStarting): MakeReady lets them serve.
  void Serve(const ModelConfig& config, int workers) {
    configs_ = {config};
    models_.push_back(ServedModel{config,
                                  ModelQueue(BatchingPolicyFor(config)),
                                  ModelStats(clock_.Now()),
                                  {},
                                  false,
                                  BatchCostModel()});
    for (int i = 0; i < workers; ++i) {
      models_[0].slots.push_back(pool_.Add(config, InstanceConfig{}, 0));
      pool_.Launch(*pool_.back());
    }
  }

  WorkerSlot& slot(size_t i) { return *pool_[i]; }

  // The worker of slot i's current process, opened on first use.
  FakeWorker& worker(size_t i) {
    const pid_t pid = slot(i).pid();
    auto found = workers_.find(pid);
    if (found != workers_.end()) return *found->second;
    const testing::FakeLaunch* launch = launcher_.ForPid(pid);
    if (!launch) throw std::runtime_error("slot " + std::to_string(i) + " has no fake process");
    std::unique_ptr<FakeWorker> opened;
    Status s = FakeWorker::Open(*launch, &opened);
    if (!s.ok()) throw std::runtime_error(s.ToString());
    return *(workers_[pid] = std::move(opened));
  }

  // The client sends `values` (rows of two float32) as request `id`; the supervisor's intake
  // (JobAcceptor::Accept) receives, parses and queues it.
  void Submit(const std::string& id, const std::vector<float>& values, int64_t timeout_ms = 0) {
    json header = {
        {"v", 1},
        {"id", id},
        {"model", configs_[0].name},
        {"inputs",
         {{{"dtype", "float32"}, {"shape", {static_cast<int64_t>(values.size() / 2), 2}}}}}};
    if (timeout_ms > 0) header["timeout_ms"] = timeout_ms;
    client_.send(zmq::buffer(header.dump()), zmq::send_flags::sndmore);
    client_.send(zmq::buffer(values), zmq::send_flags::none);
    zmq::pollitem_t item{jobs_.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, kReplyWait), 1) << "the request did not arrive";
    std::vector<zmq::message_t> frames;
    ASSERT_TRUE(zmq::recv_multipart(jobs_, std::back_inserter(frames)));
    PendingRequest request;
    size_t payload = 0;
    ASSERT_TRUE(SplitEnvelope(frames, &request, &payload));
    size_t model = 0;
    const Status s = ParseJob(frames, payload, configs_, clock_.Now(), &request, &model);
    ASSERT_TRUE(s.ok()) << s.ToString();
    Dispatcher::ApplyQueueWait(configs_[0], &request);
    Dispatcher::ApplyLatencySlo(configs_[0], &request);
    ASSERT_TRUE(models_[0].queue.Push(request));
  }

  // The model's measured cost: `fixed_ms` a batch plus `per_row_ms` a row (five batches of 1..5
  // rows observed, the cost model's warm-up).
  void TeachCost(double fixed_ms, double per_row_ms) {
    for (int rows = 1; rows <= 5; ++rows) {
      models_[0].cost.Observe(rows, (fixed_ms + per_row_ms * rows) * 1000);
    }
    ASSERT_TRUE(models_[0].cost.known());
  }

  // The next reply the client gets, within kReplyWait (or `wait`); false when none came.
  bool Receive(Reply* reply, std::chrono::milliseconds wait = kReplyWait) {
    zmq::pollitem_t item{client_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, wait) != 1) return false;
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(client_, std::back_inserter(frames)) || frames.empty()) return false;
    *reply = Reply{};
    const Status s = ParseReplyHeader(frames[0].to_string_view(), &reply->header);
    EXPECT_TRUE(s.ok()) << s.ToString() << ": " << frames[0].to_string_view();
    for (size_t i = 1; i < frames.size(); ++i) {
      const auto* first = frames[i].data<float>();
      reply->values.emplace_back(first, first + frames[i].size() / sizeof(float));
    }
    return true;
  }

  // What WorkerEvents::OnChildExit does when slot i's process was reaped: the oldest
  // running_batches() were running; all go back to the queue, in order.
  void WorkerDied(size_t i, int wait_status = SIGKILL) {
    WorkerSlot& s = slot(i);
    const size_t running = static_cast<size_t>(s.running_batches());
    std::vector<InflightBatch> orphans =
        s.OnExit(wait_status, clock_.Now(), pool_.policy(), /*shutting_down=*/false);
    for (size_t k = orphans.size(); k-- > 0;) {
      dispatcher_.Requeue(orphans[k], s.model_index(), s.last_exit(), k < running);
    }
  }

  // Declared first, destroyed last: the sockets close before the context ends.
  zmq::context_t context_;
  zmq::socket_t jobs_{context_, zmq::socket_type::router};
  zmq::socket_t client_{context_, zmq::socket_type::dealer};
  ClientQuota quota_;
  ReplyWriter replies_{jobs_, quota_};
  FakeTimeSource clock_;
  FakeWorkerLauncher launcher_;
  WorkerPool pool_{clock_};
  std::vector<ModelConfig> configs_;
  std::vector<ServedModel> models_;
  Dispatcher dispatcher_{models_, pool_, replies_, clock_};
  ResponseHandler responses_{models_, dispatcher_, replies_, clock_};
  std::map<pid_t, std::unique_ptr<FakeWorker>> workers_;
};

TEST_F(DispatcherTest, TwoQueuedRequestsGoAsOneBatchOfTwoRowsAfterTheBatchDelay) {
  Serve(BatchingModel(), 1);
  MakeReady(slot(0), clock_.Now());
  Submit("a", {1, 2});
  Submit("b", {3, 4});

  dispatcher_.DispatchAll();
  EXPECT_EQ(slot(0).inflight(), 0u) << "waits max_queue_delay_us for company";
  EXPECT_EQ(worker(0).pending(), 0u);
  EXPECT_EQ(worker(0).TakeRequestRings(), 0u);

  clock_.Advance(Micros(BatchingModel().max_queue_delay_us));
  dispatcher_.DispatchAll();
  ASSERT_EQ(slot(0).inflight(), 1u);
  EXPECT_EQ(slot(0).inflight_rows(), 2);
  EXPECT_TRUE(models_[0].queue.empty());
  EXPECT_EQ(worker(0).TakeRequestRings(), 1u) << "one doorbell ring per batch";
  const std::vector<FakeBatch> held = worker(0).Hold();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].rows, 2);
  EXPECT_EQ(held[0].specs, (std::vector<TensorSpec>{{DType::kFloat32, {2, 2}}}));
  EXPECT_EQ(held[0].Values<float>(0), (std::vector<float>{1, 2, 3, 4}));

  EXPECT_EQ(worker(0).ServeAll(), 1);
  EXPECT_TRUE(Readable(slot(0).response_fd())) << "the worker rang the response doorbell";
  responses_.Collect(slot(0));
  EXPECT_FALSE(Readable(slot(0).response_fd())) << "collecting drains the doorbell";
  EXPECT_EQ(slot(0).inflight(), 0u);
  EXPECT_EQ(slot(0).batches_done, 1u);
  EXPECT_EQ(slot(0).rows_done, 2u);
  EXPECT_EQ(slot(0).requests_done, 2u);

  for (const auto& [id, values] :
       std::vector<std::pair<std::string, std::vector<float>>>{{"a", {2, 3}}, {"b", {4, 5}}}) {
    Reply reply;
    ASSERT_TRUE(Receive(&reply)) << id;
    EXPECT_EQ(reply.id(), id);
    EXPECT_TRUE(reply.header.status.ok()) << reply.header.status.ToString();
    EXPECT_EQ(reply.header.outputs, (std::vector<TensorSpec>{{DType::kFloat32, {1, 2}}}));
    ASSERT_EQ(reply.values.size(), 1u);
    EXPECT_EQ(reply.values[0], values) << id << ": its own rows of the batch, plus one";
    EXPECT_EQ(reply.header.worker_id, 0);
  }
}

TEST_F(DispatcherTest, ABatchHeldByADeadWorkerGoesToTheNextReadyWorkerOneRequestPerBatch) {
  Serve(BatchingModel(), 2);
  MakeReady(slot(0), clock_.Now());
  Submit("r1", {1, 2});
  Submit("r2", {3, 4});
  clock_.Advance(Micros(BatchingModel().max_queue_delay_us));
  dispatcher_.DispatchAll();
  ASSERT_EQ(slot(0).inflight(), 1u) << "worker 1 is not ready yet";
  std::vector<FakeBatch> held = worker(0).Hold();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].Values<float>(0), (std::vector<float>{1, 2, 3, 4}));

  MakeReady(slot(1), clock_.Now());
  const std::string dead_segment = launcher_.ForPid(slot(0).pid())->spec.args.segment;
  WorkerDied(0);
  EXPECT_EQ(slot(0).state(), SlotState::kBackoff);
  EXPECT_EQ(slot(0).last_exit(), "killed by SIGKILL");
  EXPECT_EQ(models_[0].queue.size(), 2u);
  EXPECT_FALSE(testing::SegmentExists(dead_segment)) << "the dead worker's segment is gone";

  dispatcher_.DispatchAll();
  EXPECT_EQ(slot(0).inflight(), 0u);
  ASSERT_EQ(slot(1).inflight(), 2u) << "a request of a batch that was running runs alone after";
  EXPECT_EQ(slot(1).inflight_rows(), 2);
  held = worker(1).Hold();
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].rows, 1);
  EXPECT_EQ(held[0].Values<float>(0), (std::vector<float>{1, 2})) << "the queue kept their order";
  EXPECT_EQ(held[1].rows, 1);
  EXPECT_EQ(held[1].Values<float>(0), (std::vector<float>{3, 4}));

  EXPECT_EQ(worker(1).ServeAll(), 2);
  responses_.Collect(slot(1));
  for (const auto& [id, values] :
       std::vector<std::pair<std::string, std::vector<float>>>{{"r1", {2, 3}}, {"r2", {4, 5}}}) {
    Reply reply;
    ASSERT_TRUE(Receive(&reply)) << id;
    EXPECT_EQ(reply.id(), id);
    EXPECT_TRUE(reply.header.status.ok()) << reply.header.status.ToString();
    EXPECT_EQ(reply.values, (std::vector<std::vector<float>>{values})) << id;
    EXPECT_EQ(reply.header.worker_id, 1);
  }
}

TEST_F(DispatcherTest, OnlyTheBatchThatWasRunningWhenItsWorkerDiedCountsAnAttempt) {
  Serve(UnbatchedModel(), 2);
  MakeReady(slot(0), clock_.Now());
  dispatcher_.set_options({/*max_retries=*/0, /*shm_in_place=*/true});
  Submit("running", {1, 2});
  Submit("waiting", {3, 4});
  dispatcher_.DispatchAll();
  ASSERT_EQ(slot(0).inflight(), 2u) << "max_inflight_per_worker 2: one runs, one waits behind";
  ASSERT_EQ(slot(0).running_batches(), 1) << "a CPU worker runs one batch at a time";
  MakeReady(slot(1), clock_.Now());
  WorkerDied(0);

  Reply reply;
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.id(), "running");
  EXPECT_EQ(reply.header.status.code(), StatusCode::kInternal) << reply.header.status.ToString();
  EXPECT_NE(reply.header.status.message().find("tried 1 times"), std::string::npos)
      << reply.header.status.message();
  ASSERT_EQ(models_[0].queue.size(), 1u) << "the waiting batch never ran: requeued, not counted";

  dispatcher_.DispatchAll();
  const std::vector<FakeBatch> held = worker(1).Hold();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].Values<float>(0), (std::vector<float>{3, 4}));
  EXPECT_EQ(worker(1).ServeAll(), 1);
  responses_.Collect(slot(1));
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.id(), "waiting");
  EXPECT_EQ(reply.values, (std::vector<std::vector<float>>{{4, 5}}));
}

TEST_F(DispatcherTest, ARequestWhoseWorkersDiedMoreThanMaxRetriesTimesIsAnsweredInternal) {
  Serve(UnbatchedModel(), 3);
  for (size_t i = 0; i < 3; ++i) MakeReady(slot(i), clock_.Now());
  dispatcher_.set_options({/*max_retries=*/2, /*shm_in_place=*/true});
  Submit("poison", {7, 7});

  for (size_t death = 0; death < 3; ++death) {
    dispatcher_.DispatchAll();
    ASSERT_EQ(slot(death).inflight(), 1u) << "death " << death;
    const std::vector<FakeBatch> held = worker(death).Hold();
    ASSERT_EQ(held.size(), 1u);
    EXPECT_EQ(held[0].Values<float>(0), (std::vector<float>{7, 7})) << "death " << death;
    WorkerDied(death);
    if (death < 2) {
      Reply early;
      EXPECT_EQ(models_[0].queue.size(), 1u) << "death " << death << ": retried";
      EXPECT_FALSE(Receive(&early, kNoReplyWait)) << "death " << death << ": " << early.id();
    }
  }

  EXPECT_TRUE(models_[0].queue.empty());
  Reply reply;
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.id(), "poison");
  EXPECT_EQ(reply.header.status.code(), StatusCode::kInternal) << reply.header.status.ToString();
  EXPECT_NE(reply.header.status.message().find("tried 3 times"), std::string::npos)
      << reply.header.status.message();
  EXPECT_NE(reply.header.status.message().find("killed by SIGKILL"), std::string::npos)
      << reply.header.status.message();
  dispatcher_.DispatchAll();
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(slot(i).inflight(), 0u);
}

TEST_F(DispatcherTest, AQueuedRequestPastItsTimeoutIsAnsweredDeadlineExceededNeverDispatched) {
  Serve(UnbatchedModel(), 1);  // starting: not ready before the deadline
  Submit("late", {1, 2}, /*timeout_ms=*/50);
  Submit("patient", {3, 4});
  dispatcher_.DispatchAll();
  EXPECT_EQ(worker(0).pending(), 0u);

  clock_.Advance(Millis(49));
  dispatcher_.ExpireDeadlines();
  Reply reply;
  EXPECT_FALSE(Receive(&reply, kNoReplyWait)) << reply.id();
  EXPECT_EQ(models_[0].queue.size(), 2u);

  clock_.Advance(Millis(1));
  dispatcher_.ExpireDeadlines();
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.id(), "late");
  EXPECT_EQ(reply.header.status.code(), StatusCode::kDeadlineExceeded)
      << reply.header.status.ToString();
  EXPECT_NE(reply.header.status.message().find("timeout_ms expired after 50 ms"), std::string::npos)
      << reply.header.status.message();
  EXPECT_EQ(models_[0].queue.size(), 1u);

  MakeReady(slot(0), clock_.Now());
  dispatcher_.DispatchAll();
  const std::vector<FakeBatch> held = worker(0).Hold();
  ASSERT_EQ(held.size(), 1u) << "only the request without a deadline";
  EXPECT_EQ(held[0].Values<float>(0), (std::vector<float>{3, 4}));
  EXPECT_EQ(worker(0).ServeAll(), 1);
  responses_.Collect(slot(0));
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.id(), "patient");
  EXPECT_EQ(reply.values, (std::vector<std::vector<float>>{{4, 5}}));
}

TEST_F(DispatcherTest, ARequestPastMaxQueueWaitIsAnsweredUnavailableNamingTheWorkers) {
  ModelConfig config = UnbatchedModel();
  config.max_queue_wait_ms = 100;
  Serve(config, 1);  // stays starting
  Submit("waiting", {1, 2});
  clock_.Advance(Millis(99));
  dispatcher_.ExpireDeadlines();
  EXPECT_EQ(models_[0].queue.size(), 1u);

  clock_.Advance(Millis(1));
  dispatcher_.ExpireDeadlines();
  Reply reply;
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.id(), "waiting");
  EXPECT_EQ(reply.header.status.code(), StatusCode::kUnavailable) << reply.header.status.ToString();
  const std::string& message = reply.header.status.message();
  EXPECT_NE(message.find("max_queue_wait_ms (100 ms)"), std::string::npos) << message;
  EXPECT_NE(message.find("workers: 1 starting"), std::string::npos) << message;
  EXPECT_TRUE(models_[0].queue.empty());
}

TEST_F(DispatcherTest, ABatchFailedInvalidArgumentRunsAgainAsOneBatchPerRequest) {
  Serve(BatchingModel(), 1);
  MakeReady(slot(0), clock_.Now());
  Submit("good", {1, 2});
  Submit("bad", {-1, -1});
  clock_.Advance(Micros(BatchingModel().max_queue_delay_us));
  dispatcher_.DispatchAll();
  ASSERT_EQ(slot(0).inflight(), 1u);
  EXPECT_EQ(slot(0).inflight_rows(), 2);
  EXPECT_EQ(worker(0).ServeAll(RejectNegatives), 1);
  responses_.Collect(slot(0));
  Reply reply;
  EXPECT_FALSE(Receive(&reply, kNoReplyWait)) << "nobody is answered yet: " << reply.id();
  EXPECT_EQ(models_[0].queue.size(), 2u) << "both requests are queued again";

  dispatcher_.DispatchAll();
  ASSERT_EQ(slot(0).inflight(), 2u) << "two batches";
  EXPECT_EQ(slot(0).inflight_rows(), 2);
  const std::vector<FakeBatch> held = worker(0).Hold();
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].rows, 1);
  EXPECT_EQ(held[0].Values<float>(0), (std::vector<float>{1, 2}));
  EXPECT_EQ(held[1].rows, 1);
  EXPECT_EQ(held[1].Values<float>(0), (std::vector<float>{-1, -1}));

  EXPECT_EQ(worker(0).ServeAll(RejectNegatives), 2);
  responses_.Collect(slot(0));
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.id(), "good");
  EXPECT_TRUE(reply.header.status.ok()) << reply.header.status.ToString();
  EXPECT_EQ(reply.values, (std::vector<std::vector<float>>{{2, 3}}));
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.id(), "bad");
  EXPECT_EQ(reply.header.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reply.header.status.message(), "negative input");
  EXPECT_TRUE(models_[0].queue.empty());
}

// Latency objective (issue 32): latency_slo_ms 100, a measured 10 ms a batch + 10 ms a row.
ModelConfig SloModel() {
  ModelConfig m = BatchingModel();
  m.max_queue_delay_us = 0;  // what a user sets with an SLO: nothing else
  m.latency_slo_ms = 100;
  return m;
}

TEST_F(DispatcherTest, WithAnSloAQueuedRequestAWorkerWouldFinishTooLateIsShedBeforeRunning) {
  Serve(SloModel(), 1);  // starting: not ready yet
  TeachCost(10, 10);
  Submit("late", {1, 2});
  clock_.Advance(Millis(90));
  Submit("fresh", {3, 4});
  MakeReady(slot(0), clock_.Now());
  dispatcher_.DispatchAll();
  // "late" has 10 ms left and its batch takes 20: answered now, never run.
  Reply reply;
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.id(), "late");
  EXPECT_EQ(reply.header.status.code(), StatusCode::kDeadlineExceeded);
  const std::string message = reply.header.status.message();
  EXPECT_NE(message.find("would finish at ~110 ms after arrival"), std::string::npos) << message;
  EXPECT_NE(message.find("latency_slo_ms of 100 ms; shed before running"), std::string::npos)
      << message;
  const std::vector<FakeBatch> held = worker(0).Hold();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].Values<float>(0), (std::vector<float>{3, 4})) << "only the fresh one runs";
  EXPECT_EQ(models_[0].stats.slo_refused(), 1u);
  EXPECT_EQ(worker(0).ServeAll(), 1);
  responses_.Collect(slot(0));
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.id(), "fresh");
  EXPECT_TRUE(reply.header.status.ok()) << reply.header.status.ToString();
  EXPECT_EQ(models_[0].stats.within_slo(), 1u);
}

TEST_F(DispatcherTest, WithAnSloTheBatchIsCutSoItsHeadFinishesInTime) {
  Serve(SloModel(), 1);
  TeachCost(10, 10);
  for (int i = 0; i < 4; ++i) Submit("r" + std::to_string(i), {1, 2});
  clock_.Advance(Millis(50));
  MakeReady(slot(0), clock_.Now());
  dispatcher_.DispatchAll();
  // 50 ms left: 10 + 10n <= 50 for n <= 4 rows.
  std::vector<FakeBatch> held = worker(0).Hold();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].rows, 4);
  EXPECT_EQ(worker(0).ServeAll(), 1);
  responses_.Collect(slot(0));

  for (int i = 0; i < 4; ++i) Submit("s" + std::to_string(i), {1, 2});
  clock_.Advance(Millis(60));
  dispatcher_.DispatchAll();
  held = worker(0).Hold();
  ASSERT_GE(held.size(), 1u);
  EXPECT_EQ(held[0].rows, 3) << "40 ms left: a batch of 3 takes 40";
}

TEST_F(DispatcherTest, WithAnSloARequestThatCannotMakeItIsRefusedAtOnceNamingTheEstimate) {
  Serve(SloModel(), 1);
  TeachCost(10, 10);
  MakeReady(slot(0), clock_.Now());
  PendingRequest request;
  request.received = clock_.Now();
  Dispatcher::ApplyLatencySlo(configs_[0], &request);
  EXPECT_TRUE(request.deadline_is_slo);
  EXPECT_TRUE(dispatcher_.CheckDeadline(models_[0], request, clock_.Now()).ok()) << "idle: 20 ms";
  // 20 rows queued ahead (the worker not taking them yet): 5 batches, 250 ms, then its own 20.
  for (int i = 0; i < 20; ++i) Submit("q" + std::to_string(i), {1, 2});
  const Status s = dispatcher_.CheckDeadline(models_[0], request, clock_.Now());
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("would finish at ~270 ms, deadline 100 ms"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("20 rows queued ahead"), std::string::npos) << s.message();
}

TEST_F(DispatcherTest, WithoutAnSloNothingIsShedAndBatchesAreNotCut) {
  ModelConfig m = SloModel();
  m.latency_slo_ms = 0;
  Serve(m, 1);
  TeachCost(10, 10);
  Submit("old", {1, 2});
  clock_.Advance(Millis(5'000));
  MakeReady(slot(0), clock_.Now());
  dispatcher_.DispatchAll();
  const std::vector<FakeBatch> held = worker(0).Hold();
  ASSERT_EQ(held.size(), 1u) << "served however long it waited";
  EXPECT_EQ(models_[0].stats.slo_refused(), 0u);
}

}  // namespace
}  // namespace torchfarm
