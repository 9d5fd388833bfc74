// The Dispatcher's test fixture (dispatcher_test.cc, slo_fairness_test.cc): a real pool launching
// through the fake launcher (tests/supervisor/fake_worker.h), so batches travel through real
// segments and doorbells and the test plays the worker; requests come from a DEALER client
// through a ROUTER socket and ParseJob, answers go back through ResponseHandler and ReplyWriter,
// and the client reads them. Time is a FakeTimeSource.
#pragma once

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
#include "supervisor/dispatch/dispatcher.h"
#include "supervisor/dispatch/response_handler.h"
#include "supervisor/intake/job_intake.h"
#include "tests/supervisor/fake_worker.h"

namespace torchfarm::dispatch_testing {

using nlohmann::json;
using testing::FakeBatch;
using testing::FakeOutputs;
using testing::FakeWorker;
using testing::FakeWorkerLauncher;
using testing::MakeReady;

inline constexpr auto kReplyWait = std::chrono::milliseconds(1'000);
inline constexpr auto kNoReplyWait = std::chrono::milliseconds(10);

// One float32 input of two columns; batches of up to 4 rows wait 2 ms for company.
inline ModelConfig BatchingModel() {
  ModelConfig m = testing::SmallModel();
  m.max_batch_size = 4;
  m.max_queue_delay_us = 2'000;
  return m;
}

inline bool Readable(int fd) {
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
    PendingRequest request;
    Arrive(id, values, timeout_ms, &request);
    if (::testing::Test::HasFatalFailure()) return;
    Dispatcher::ApplyQueueWait(configs_[0], &request);
    Dispatcher::ApplyLatencySlo(configs_[0], &request);
    ASSERT_TRUE(models_[0].queue.Push(request));
  }

  // As Submit, from `client` (the key the farm counts it by), through the rest of
  // JobAcceptor::Accept: the weight resolved, then refused at once when its deadline cannot be
  // met (the refusal returned, nothing queued), else queued.
  Status Offer(const std::string& client, const std::string& id, const std::vector<float>& values) {
    PendingRequest request;
    Arrive(id, values, 0, &request);
    if (::testing::Test::HasFatalFailure()) return Internal("the request did not arrive");
    request.client = client;
    Dispatcher::ApplyQueueWait(configs_[0], &request);
    Dispatcher::ApplyLatencySlo(configs_[0], &request);
    Dispatcher::ApplyClientWeight(configs_[0], &request);
    bool only_by_margin = false;
    Status s = dispatcher_.CheckDeadline(models_[0], request, clock_.Now(), &only_by_margin);
    if (!s.ok() && configs_[0].latency_slo_ms > 0) {
      dispatcher_.RecordSloRefused(models_[0], only_by_margin);
    }
    if (s.ok() && !models_[0].queue.Push(request)) s = ResourceExhausted("queue full");
    return s;
  }

  // Sends request `id` from the client and receives and parses it as the job socket does.
  void Arrive(const std::string& id, const std::vector<float>& values, int64_t timeout_ms,
              PendingRequest* request) {
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
    size_t payload = 0;
    ASSERT_TRUE(SplitEnvelope(frames, request, &payload));
    size_t model = 0;
    const Status s = ParseJob(frames, payload, configs_, clock_.Now(), request, &model);
    ASSERT_TRUE(s.ok()) << s.ToString();
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

}  // namespace torchfarm::dispatch_testing
