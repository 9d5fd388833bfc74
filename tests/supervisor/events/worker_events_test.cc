// WorkerEvents without processes (issue 28): what the loop does when a worker exits (its finished
// batches answered, the rest requeued in order to a promoted spare; every queued request failed
// when no worker is left; orphans failed while the farm stops) and when a worker's control
// messages arrive (hello, ready, malformed), on the fake launcher (tests/supervisor/
// fake_worker.h), a fake clock and real ZeroMQ sockets: requests come from a DEALER client through
// ParseJob, answers are read back by it.
#include "supervisor/events/worker_events.h"

#include <signal.h>

#include <iterator>
#include <map>
#include <memory>

#include <gtest/gtest.h>
#include <zmq_addon.hpp>

#include "common/protocol.h"
#include "ipc/control_protocol.h"
#include "ipc/shm_layout.h"
#include "supervisor/intake/job_intake.h"
#include "tests/supervisor/fake_worker.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using testing::FakeWorker;
using testing::FakeWorkerLauncher;
using testing::MakeReady;

constexpr auto kWait = std::chrono::milliseconds(1'000);

struct EventReply {
  ReplyHeader header;
  std::vector<float> values;
};

class WorkerEventsTest : public ::testing::Test {
 protected:
  WorkerEventsTest() {
    for (auto* s : {&jobs_, &client_, &control_}) s->set(zmq::sockopt::linger, 0);
    jobs_.set(zmq::sockopt::router_mandatory, 1);
    jobs_.bind("inproc://jobs");
    client_.connect("inproc://jobs");
    control_.bind("inproc://control");
    LaunchContext context;
    context.worker_binary = "/nonexistent/torchfarm-worker";
    context.control_endpoint = "inproc://control";
    context.segment_prefix = testing::UniqueSegmentPrefix();
    context.launcher = &launcher_;
    policy_.max_restarts = 0;  // a worker that does not start fails its slot at once
    workers_.Configure(context, policy_);
  }

  // One model of `count` workers and `spares` spares, all launched, none ready.
  ServedModel& Serve(int count, int spares = 0) {
    const size_t index = models_.Add(testing::SmallModel("m", count, spares), FileIdentity{});
    spares_.Add(index);
    models_.RebuildServed();
    for (size_t i = 0; i < workers_.size(); ++i) workers_.Launch(*workers_[i]);
    return models_[index];
  }
  FakeWorker& worker(size_t slot) {
    const pid_t pid = workers_[slot]->pid();
    auto& w = fakes_[pid];
    if (!w) {
      EXPECT_TRUE(FakeWorker::Open(*launcher_.ForPid(pid), &w).ok());
    }
    return *w;
  }
  void Submit(const std::string& id, const std::vector<float>& values) {
    const json header = {{"v", 1},
                         {"id", id},
                         {"model", "m"},
                         {"inputs", {{{"dtype", "float32"}, {"shape", {1, 2}}}}}};
    client_.send(zmq::buffer(header.dump()), zmq::send_flags::sndmore);
    client_.send(zmq::buffer(values), zmq::send_flags::none);
    zmq::pollitem_t item{jobs_.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, kWait), 1);
    std::vector<zmq::message_t> frames;
    ASSERT_TRUE(zmq::recv_multipart(jobs_, std::back_inserter(frames)));
    PendingRequest request;
    size_t payload = 0, served = 0;
    ASSERT_TRUE(SplitEnvelope(frames, &request, &payload));
    ASSERT_TRUE(
        ParseJob(frames, payload, models_.served_configs(), clock_.Now(), &request, &served).ok());
    ASSERT_TRUE(models_[0].queue.Push(request));
  }
  bool Receive(EventReply* reply) {
    zmq::pollitem_t item{client_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, kWait) != 1) return false;
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(client_, std::back_inserter(frames))) return false;
    EXPECT_TRUE(ParseReplyHeader(frames[0].to_string_view(), &reply->header).ok());
    reply->values.clear();
    if (frames.size() > 1) {
      const auto* v = frames[1].data<float>();
      reply->values.assign(v, v + frames[1].size() / sizeof(float));
    }
    return true;
  }

  zmq::context_t context_;
  zmq::socket_t jobs_{context_, zmq::socket_type::router};
  zmq::socket_t client_{context_, zmq::socket_type::dealer};
  zmq::socket_t control_{context_, zmq::socket_type::router};
  ClientQuota quota_;
  ReplyWriter replies_{jobs_, quota_};
  FakeTimeSource clock_;
  RestartPolicy policy_;
  FakeWorkerLauncher launcher_;
  WorkerPool workers_{clock_};
  FarmState farm_;
  ModelTable models_{workers_, clock_};
  Dispatcher dispatcher_{models_.models(), workers_, replies_, clock_};
  ResponseHandler responses_{models_.models(), dispatcher_, replies_, clock_};
  SpareManager spares_{models_, workers_, farm_};
  ZygotePool zygotes_;
  MpsController mps_;
  WorkerEvents events_{{models_, workers_, dispatcher_, responses_, spares_, zygotes_, mps_,
                        control_, farm_, clock_}};
  std::map<pid_t, std::unique_ptr<FakeWorker>> fakes_;
};

TEST_F(WorkerEventsTest, AnExitAnswersWhatWasDoneAndSendsTheRestToAPromotedSpare) {
  ServedModel& model = Serve(1, /*spares=*/1);
  const size_t serving = model.slots[0], spare = model.spares[0];
  MakeReady(*workers_[serving], clock_.Now());
  MakeReady(*workers_[spare], clock_.Now());
  Submit("done", {1, 2});
  dispatcher_.DispatchAll();
  Submit("running", {3, 4});
  dispatcher_.DispatchAll();
  ASSERT_EQ(workers_[serving]->inflight(), 2u);
  // The worker finished the first batch, then was killed while the second ran.
  ASSERT_TRUE(worker(serving).ServeOne());
  const pid_t pid = workers_[serving]->pid();
  events_.OnChildExit(pid, SIGKILL, clock_.Now());

  EventReply reply;
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.header.id, "done") << "a finished batch is answered, not run again";
  EXPECT_EQ(reply.values, (std::vector<float>{2, 3}));
  EXPECT_EQ(model.slots[0], spare) << "the ready spare took the dead worker's place";
  EXPECT_EQ(model.spare_promotions, 1u);
  EXPECT_EQ(model.queue.size(), 1u) << "the running batch went back to the queue";
  dispatcher_.DispatchAll();
  ASSERT_EQ(workers_[spare]->inflight(), 1u);
  EXPECT_EQ(worker(spare).ServeAll(), 1);
  responses_.Collect(*workers_[spare]);
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.header.id, "running");
  EXPECT_TRUE(reply.header.status.ok()) << reply.header.status.ToString();
  EXPECT_EQ(reply.values, (std::vector<float>{4, 5}));
  EXPECT_EQ(reply.header.worker_id, workers_[spare]->id());
}

// The dashboard's event ring (issue 33): the exit with its cause, and the spare that took over.
TEST_F(WorkerEventsTest, AnExitAndThePromotionThatFollowsAreEventsWithTheirCause) {
  EventRing ring;
  events_.set_events(&ring);
  spares_.set_events(&ring);
  ServedModel& model = Serve(1, /*spares=*/1);
  const size_t serving = model.slots[0], spare = model.spares[0];
  MakeReady(*workers_[serving], clock_.Now());
  MakeReady(*workers_[spare], clock_.Now());
  const pid_t pid = workers_[serving]->pid();
  events_.OnChildExit(pid, SIGKILL, clock_.Now());
  const json list = ring.ToJson();
  ASSERT_EQ(list.size(), 2u) << list.dump();
  EXPECT_EQ(list[0]["kind"], "exit") << "newest first: the exit is noted after the promotion";
  EXPECT_EQ(list[0]["model"], "m");
  EXPECT_EQ(list[0]["worker"], workers_[serving]->id());
  const std::string text = list[0]["text"];
  EXPECT_NE(text.find("pid " + std::to_string(pid) + " exited: killed by SIGKILL"),
            std::string::npos)
      << text;
  EXPECT_EQ(list[1]["kind"], "promotion");
  EXPECT_NE(list[1]["text"].get<std::string>().find("killed by SIGKILL"), std::string::npos)
      << list[1]["text"];
}

TEST_F(WorkerEventsTest, WhenTheLastWorkerFailsItsModelsQueuedRequestsAreAnsweredAtOnce) {
  ServedModel& model = Serve(1);
  Submit("waiting", {1, 2});
  WorkerSlot& slot = *workers_[model.slots[0]];
  slot.OnFatalError("cannot load /nonexistent/m.pt", "model", clock_.Now());
  events_.OnChildExit(slot.pid(), 1 << 8, clock_.Now());  // exit status 1 before ready
  EXPECT_EQ(slot.state(), SlotState::kFailed);
  EXPECT_TRUE(model.queue.empty());
  EventReply reply;
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.header.id, "waiting");
  EXPECT_EQ(reply.header.status.code(), StatusCode::kUnavailable);
  EXPECT_NE(reply.header.status.message().find("cannot load /nonexistent/m.pt"), std::string::npos)
      << reply.header.status.message();
}

TEST_F(WorkerEventsTest, WhileTheFarmStopsAnExitedWorkersBatchesAreFailedNotRequeued) {
  ServedModel& model = Serve(2);
  MakeReady(*workers_[model.slots[0]], clock_.Now());
  MakeReady(*workers_[model.slots[1]], clock_.Now());
  Submit("late", {1, 2});
  dispatcher_.DispatchAll();
  const size_t holder = workers_[model.slots[0]]->inflight() == 1 ? model.slots[0] : model.slots[1];
  farm_.phase = FarmPhase::kStoppingWorkers;
  events_.OnChildExit(workers_[holder]->pid(), SIGKILL, clock_.Now());
  EXPECT_TRUE(model.queue.empty());
  EventReply reply;
  ASSERT_TRUE(Receive(&reply));
  EXPECT_EQ(reply.header.status.code(), StatusCode::kUnavailable);
  EXPECT_NE(reply.header.status.message().find("shut down"), std::string::npos);
  EXPECT_EQ(workers_[holder]->state(), SlotState::kStopped) << "no restart while stopping";
}

TEST_F(WorkerEventsTest,
       HelloAndReadyOnTheControlSocketMakeTheWorkerServeAndMalformedOnesAreDropped) {
  ServedModel& model = Serve(1);
  WorkerSlot& slot = *workers_[model.slots[0]];
  zmq::socket_t worker(context_, zmq::socket_type::dealer);
  worker.set(zmq::sockopt::linger, 0);
  worker.set(zmq::sockopt::routing_id, launcher_.last().spec.args.RoutingId());
  worker.connect("inproc://control");
  auto send = [&](const std::string& text) {
    worker.send(zmq::buffer(text), zmq::send_flags::none);
    zmq::pollitem_t item{control_.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, kWait), 1);
    events_.OnControl();
  };
  send(json{{"type", ipc::kMsgHello}, {"layout_version", ipc::kLayoutVersion}}.dump());
  EXPECT_EQ(slot.state(), SlotState::kStarting);
  send("{not json");
  send(json{{"type", ipc::kMsgHeartbeat}, {"batches", "many"}, {"stage_us", 7}}.dump());
  EXPECT_EQ(slot.state(), SlotState::kStarting) << "malformed messages change nothing";
  send(json{{"type", ipc::kMsgReady}, {"load_ms", 12.5}, {"precision", "fp32"}}.dump());
  EXPECT_EQ(slot.state(), SlotState::kReady);
  EXPECT_EQ(slot.start_times().load_ms, 12.5);
  EXPECT_EQ(slot.telemetry.precision, "fp32");
  // Every heartbeat is acknowledged, the malformed one too (its fields are ignored, not fatal).
  send(json{{"type", ipc::kMsgHeartbeat}, {"batches", 3}}.dump());
  EXPECT_EQ(slot.telemetry.batches, 3u);
  zmq::pollitem_t item{worker.handle(), 0, ZMQ_POLLIN, 0};
  for (int n = 0; n < 2; ++n) {
    ASSERT_EQ(zmq::poll(&item, 1, kWait), 1);
    zmq::message_t ack;
    ASSERT_TRUE(worker.recv(ack));
    EXPECT_EQ(json::parse(ack.to_string()).value("type", ""), ipc::kMsgAck) << n;
  }
  // A stop request reaches the worker by its routing id.
  events_.SendStop(slot);
  ASSERT_EQ(zmq::poll(&item, 1, kWait), 1);
  zmq::message_t stop;
  ASSERT_TRUE(worker.recv(stop));
  EXPECT_EQ(json::parse(stop.to_string()).value("type", ""), ipc::kMsgStop);
}

// Issue 35: a worker is an untrusted writer of its segment. What it writes out of bounds kills it
// (the fake pid answers kill() with ESRCH), its batch stays in flight, and its exit requeues it and
// restarts the slot like a crash, counted as a protocol violation.
class ProtocolViolationTest : public WorkerEventsTest {
 protected:
  // A ready worker holding one dispatched batch ("held"), and the worker's view of its header.
  WorkerSlot& HoldOne() {
    ServedModel& model = Serve(1);
    WorkerSlot& slot = *workers_[model.slots[0]];
    MakeReady(slot, clock_.Now());
    Submit("held", {1, 2});
    dispatcher_.DispatchAll();
    EXPECT_EQ(slot.inflight(), 1u);
    EXPECT_TRUE(
        ipc::WorkerSegment::Open(launcher_.ForPid(slot.pid())->spec.args.segment, &view_).ok());
    return slot;
  }
  ipc::SegmentHeader& header() { return *reinterpret_cast<ipc::SegmentHeader*>(view_->base()); }
  // The exit the SIGKILL causes, then the requeued request served by the restarted worker.
  void ExpectRequeuedAndRestarted(WorkerSlot& slot, const std::string& field) {
    EXPECT_EQ(slot.protocol_violations(), 1u);
    EXPECT_FALSE(slot.CanAccept()) << "no batch goes to a worker being killed";
    const pid_t pid = slot.pid();
    events_.OnChildExit(pid, SIGKILL, clock_.Now());
    EXPECT_EQ(slot.state(), SlotState::kBackoff) << "restarted like after a crash";
    EXPECT_NE(slot.last_exit().find("protocol violation: " + field), std::string::npos)
        << slot.last_exit();
    EXPECT_EQ(workers_.protocol_violations(), 1u);
    EXPECT_EQ(models_[0].queue.size(), 1u) << "the batch it held went back to the queue";
    view_.reset();
  }
  std::unique_ptr<ipc::WorkerSegment> view_;
};

TEST_F(ProtocolViolationTest, AResponseHeadFarPastTheTailKillsTheWorkerAtOnce) {
  WorkerSlot& slot = HoldOne();
  header().response_head.value.store(uint64_t{1} << 40);
  const auto started = std::chrono::steady_clock::now();
  responses_.Collect(slot);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(100))
      << "the reader must not walk 2^40 responses";
  EXPECT_EQ(slot.inflight(), 1u) << "nothing was read, so the batch is still the worker's";
  ExpectRequeuedAndRestarted(slot, "response_head");
}

TEST_F(ProtocolViolationTest, AResponseForTheWrongBatchKillsTheWorkerAndItsBatchIsRunAgain) {
  WorkerSlot& slot = HoldOne();
  ASSERT_TRUE(worker(0).ServeOne());
  ipc::SlotHeaderOf(view_->response_ring().SlotAt(0))->batch_id += 1000;
  responses_.Collect(slot);
  EXPECT_EQ(slot.inflight(), 1u) << "the batch went back in flight, not to its client";
  EventReply reply;
  EXPECT_FALSE(Receive(&reply)) << "no answer from a response that broke the layout";
  ExpectRequeuedAndRestarted(slot, "response slot header");
}

TEST_F(ProtocolViolationTest, ARequestTailPastTheSupervisorsHeadKillsTheWorker) {
  WorkerSlot& slot = HoldOne();
  header().request_tail.value.store(7);  // the supervisor published 1 request
  responses_.Collect(slot);
  ExpectRequeuedAndRestarted(slot, "request_tail");
}

}  // namespace
}  // namespace torchfarm
