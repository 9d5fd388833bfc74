// Dispatcher without processes, on a fake clock: batching of queued requests onto a ready worker,
// requeueing after a worker died (and the error after max_retries deaths), queue deadlines, and a
// batch failed INVALID_ARGUMENT run again request by request. The pool is real and launches
// through the fake launcher (tests/supervisor/fake_worker.h), so batches travel through real
// segments and doorbells and the test plays the worker; requests come from a DEALER client through
// a ROUTER socket and ParseJob, answers go back through ResponseHandler and ReplyWriter, and the
// client reads them.
#include "tests/supervisor/dispatch/dispatcher_fixture.h"

#include <string>
#include <vector>

namespace torchfarm {
namespace {

using dispatch_testing::BatchingModel;
using dispatch_testing::DispatcherTest;
using dispatch_testing::kNoReplyWait;
using dispatch_testing::Readable;
using dispatch_testing::Reply;
using nlohmann::json;
using testing::FakeBatch;
using testing::FakeOutputs;
using testing::MakeReady;

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

// A client's own deadline (deadline_unix_us, timeout_ms) nearer than the SLO is what the answer is
// judged by: answered 40 ms after arrival, within latency_slo_ms (100) but past the client's 30,
// it is a miss the margin hears of, as the client sees it; answered by it, within.
TEST_F(DispatcherTest, WithAnSloAnAnswerPastTheClientsNearerDeadlineIsAMiss) {
  Serve(SloModel(), 1);
  MakeReady(slot(0), clock_.Now());
  TeachCost(10, 10);
  auto submit_with_client_deadline = [&](const std::string& id, int64_t client_ms) {
    PendingRequest request;
    Arrive(id, {1, 2}, 0, &request);
    request.deadline = request.received + Millis(client_ms);  // what intake makes of it
    request.deadline_is_client = true;
    Dispatcher::ApplyQueueWait(configs_[0], &request);
    Dispatcher::ApplyLatencySlo(configs_[0], &request);
    ASSERT_TRUE(request.deadline_is_client) << "30 ms is nearer than the SLO's 100";
    ASSERT_TRUE(models_[0].queue.Push(request));
  };
  // Dispatches what is queued, lets `ms` pass and answers it: the reply the client gets.
  auto answer_after = [&](int64_t ms, Reply* reply) {
    dispatcher_.DispatchAll();
    clock_.Advance(Millis(ms));
    ASSERT_EQ(worker(0).ServeAll(), 1);
    responses_.Collect(slot(0));
    ASSERT_TRUE(Receive(reply));
    EXPECT_TRUE(reply->header.status.ok()) << "answered: " << reply->header.status.ToString();
  };
  Reply reply;
  submit_with_client_deadline("late", 30);
  if (HasFatalFailure()) return;
  answer_after(40, &reply);
  if (HasFatalFailure()) return;
  EXPECT_EQ(reply.id(), "late");
  EXPECT_EQ(models_[0].stats.within_slo(), 0u) << "40 ms is within 100 but past the client's 30";
  EXPECT_DOUBLE_EQ(models_[0].slo_margin.factor(), SloMargin::kMissStep);

  submit_with_client_deadline("in time", 30);
  if (HasFatalFailure()) return;
  answer_after(25, &reply);
  if (HasFatalFailure()) return;
  EXPECT_EQ(reply.id(), "in time");
  EXPECT_EQ(models_[0].stats.within_slo(), 1u);
  EXPECT_LT(models_[0].slo_margin.factor(), SloMargin::kMissStep);

  // A nearer timeout_ms (what the v2 front ends make of Triton's timeout and a gRPC deadline) is
  // the client's deadline as well.
  Submit("timeout", {1, 2}, /*timeout_ms=*/30);
  answer_after(40, &reply);
  if (HasFatalFailure()) return;
  EXPECT_EQ(reply.id(), "timeout");
  EXPECT_EQ(models_[0].stats.within_slo(), 1u) << "40 ms is past the timeout_ms of 30";
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

// The margin (slo_margin.h) hears of a refusal only when the unscaled estimate would have
// accepted it: overload refusals must not dilute the misses of the accepted requests.
TEST_F(DispatcherTest, WithAnSloOnlyARefusalTheMarginAloneMadeCountsForTheMargin) {
  Serve(SloModel(), 1);
  TeachCost(10, 10);
  MakeReady(slot(0), clock_.Now());
  for (int i = 0; i < 15; ++i) models_[0].slo_margin.Observe(false);
  const double raised = models_[0].slo_margin.factor();
  ASSERT_NEAR(raised, 2.08, 0.01);
  PendingRequest request;
  request.received = clock_.Now();
  Dispatcher::ApplyLatencySlo(configs_[0], &request);
  // 4 rows ahead: one batch of 50 ms, then its own 20: 70 ms plain, ~146 with the margin.
  for (int i = 0; i < 4; ++i) Submit("q" + std::to_string(i), {1, 2});
  bool only_by_margin = false;
  Status s = dispatcher_.CheckDeadline(models_[0], request, clock_.Now(), &only_by_margin);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("would finish at ~145 ms, deadline 100 ms"), std::string::npos)
      << s.message();
  EXPECT_TRUE(only_by_margin) << "70 ms without the margin";
  // 20 rows ahead: 270 ms even without it.
  for (int i = 4; i < 20; ++i) Submit("q" + std::to_string(i), {1, 2});
  s = dispatcher_.CheckDeadline(models_[0], request, clock_.Now(), &only_by_margin);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(only_by_margin);

  // Through intake (the queued requests' client, ""): overload refusals leave the factor, and so
  // do refusals the margin alone made while requests are queued (a burst under load).
  EXPECT_EQ(Offer("", "overload", {1, 2}).code(), StatusCode::kDeadlineExceeded);
  EXPECT_DOUBLE_EQ(models_[0].slo_margin.factor(), raised);
  while (!models_[0].queue.empty()) models_[0].queue.PopHead();
  for (int i = 0; i < 4; ++i) Submit("p" + std::to_string(i), {1, 2});
  for (int i = 0; i < 3 * SloMargin::kStuckRefusals; ++i) {
    ASSERT_EQ(Offer("", "busy", {1, 2}).code(), StatusCode::kDeadlineExceeded);
  }
  EXPECT_DOUBLE_EQ(models_[0].slo_margin.factor(), raised);
  // With the model idle, a 4-row request (50 ms plain, ~104 with the margin): kStuckRefusals of
  // them leave it, the next steps it down.
  while (!models_[0].queue.empty()) models_[0].queue.PopHead();
  const std::vector<float> four_rows = {1, 2, 3, 4, 5, 6, 7, 8};
  for (int i = 0; i < SloMargin::kStuckRefusals; ++i) {
    ASSERT_EQ(Offer("", "idle", four_rows).code(), StatusCode::kDeadlineExceeded);
  }
  EXPECT_DOUBLE_EQ(models_[0].slo_margin.factor(), raised);
  EXPECT_EQ(Offer("", "idle", four_rows).code(), StatusCode::kDeadlineExceeded);
  EXPECT_DOUBLE_EQ(models_[0].slo_margin.factor(), raised / SloMargin::kMissStep);
  EXPECT_EQ(models_[0].stats.slo_refused(), 2u + 4 * SloMargin::kStuckRefusals);
}

TEST_F(DispatcherTest, WithAnSloOnlyAShedTheMarginAloneMadeCountsForTheMargin) {
  Serve(SloModel(), 1);  // starting: not ready yet
  TeachCost(10, 10);
  for (int i = 0; i < 15; ++i) models_[0].slo_margin.Observe(false);
  const double raised = models_[0].slo_margin.factor();
  Submit("late", {1, 2});
  clock_.Advance(Millis(95));  // 5 ms left: 20 ms even without the margin
  MakeReady(slot(0), clock_.Now());
  dispatcher_.DispatchAll();
  Reply reply;
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.id(), "late");
  EXPECT_EQ(reply.header.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_DOUBLE_EQ(models_[0].slo_margin.factor(), raised);

  // 30 ms left: 20 plain, ~42 with the margin. Shed by the margin alone, nothing else queued or
  // running, kStuckRefusals + 1 times in a row: the last steps it down.
  for (int i = 0; i <= SloMargin::kStuckRefusals; ++i) {
    EXPECT_DOUBLE_EQ(models_[0].slo_margin.factor(), raised) << i;
    Submit("tight", {1, 2});  // queued only: the idle worker would take it at DispatchAll
    clock_.Advance(Millis(70));
    dispatcher_.DispatchAll();
    ASSERT_TRUE(Receive(&reply));
    EXPECT_EQ(reply.id(), "tight");
    ASSERT_EQ(reply.header.status.code(), StatusCode::kDeadlineExceeded);
  }
  EXPECT_DOUBLE_EQ(models_[0].slo_margin.factor(), raised / SloMargin::kMissStep);
  EXPECT_EQ(models_[0].stats.slo_refused(), 2u + SloMargin::kStuckRefusals);
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
