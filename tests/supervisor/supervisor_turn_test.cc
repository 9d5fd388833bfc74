// The whole loop, one turn at a time (Supervisor::RunTurn), without a process: the Supervisor
// starts with the fake launcher (tests/supervisor/fake_worker.h) and a fake clock, a test DEALER
// plays the worker's control channel (hello, ready) and FakeWorker its compute loop on the real
// segment; a real client sends a request to the job socket and reads the answer; the admin socket
// answers health; SIGTERM moves the farm's phase. Each RunTurn polls without waiting long: the
// fake clock starts at the real monotonic time, so the loop timer is never armed far ahead.
#include "supervisor/supervisor.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <set>

#include <gtest/gtest.h>
#include <zmq_addon.hpp>

#include "common/protocol.h"
#include "ipc/control_protocol.h"
#include "ipc/shm_layout.h"
#include "supervisor/frontend/frontend_endpoint.h"
#include "supervisor/frontend/typed_frame.h"
#include "tests/frontend/hub_loop.h"
#include "tests/supervisor/fake_worker.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using testing::FakeWorker;
using testing::FakeWorkerLauncher;

// A fake clock the test moves; Sync() catches it up with the real monotonic time, so the loop
// timer armed from it (timerfd) fires when it should and a turn waits at most the loop's 100 ms.
class SyncedFakeClock final : public TimeSource {
 public:
  TimePoint Now() const override { return now_; }
  void Advance(Clock::duration d) { now_ += d; }
  void Sync() { now_ = std::max(now_, Clock::now()); }

 private:
  TimePoint now_ = Clock::now();
};

class SupervisorTurnTest : public ::testing::Test {
 protected:
  SupervisorTurnTest() {
    dir_ = std::filesystem::temp_directory_path() /
           ("torchfarm-turn-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "mlp.pt") << "bytes the fake worker never reads";
    const json j = {{"endpoint", "ipc://" + (dir_ / "jobs.sock").string()},
                    {"run_dir", (dir_ / "run").string()},
                    {"worker_binary", "/bin/true"},
                    {"worker_launch", "exec"},
                    {"models",
                     {{{"name", "mlp"},
                       {"path", (dir_ / "mlp.pt").string()},
                       {"inputs", {{{"dtype", "float32"}, {"shape", {-1, 2}}}}},
                       {"instances", {{{"device", "cpu"}, {"count", 1}}}},
                       {"slot_bytes", 4096},
                       {"ring_slots", 2},
                       {"max_batch_size", 4},
                       {"max_queue_delay_us", 0}}}}};
    const Status s = ParseConfig(j, dir_.string(), &config_);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  ~SupervisorTurnTest() override {
    supervisor_.reset();
    std::filesystem::remove_all(dir_);
  }

  void StartFarm() {
    supervisor_ = std::make_unique<Supervisor>(config_, SupervisorOptions::From(config_, "warn"),
                                               SupervisorSeams{&clock_, &launcher_});
    const Status s = supervisor_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // Turns until `done`, for at most 3 s of real time (a turn waits at most 100 ms).
  template <typename Done>
  bool TurnUntil(Done&& done) {
    const TimePoint give_up = Clock::now() + std::chrono::seconds(3);
    while (Clock::now() < give_up) {
      clock_.Sync();
      supervisor_->RunTurn(clock_.Now());
      if (done()) return true;
    }
    return false;
  }
  static bool Readable(zmq::socket_t& socket) {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    return zmq::poll(&item, 1, std::chrono::milliseconds(0)) == 1;
  }
  // The worker's control channel to `launch`'s supervisor: hello, then ready, as torchfarm-worker
  // sends them; the loop reads them on its next turns.
  zmq::socket_t SayHelloAndReady(const testing::FakeLaunch& launch) {
    zmq::socket_t control(context_, zmq::socket_type::dealer);
    control.set(zmq::sockopt::linger, 0);
    control.set(zmq::sockopt::routing_id, launch.spec.args.RoutingId());
    control.connect(launch.spec.args.control_endpoint);
    control.send(
        zmq::buffer(json{{"type", ipc::kMsgHello}, {"layout_version", ipc::kLayoutVersion}}.dump()),
        zmq::send_flags::none);
    control.send(zmq::buffer(json{{"type", ipc::kMsgReady}, {"load_ms", 1.0}}.dump()),
                 zmq::send_flags::none);
    return control;
  }
  // A DEALER client of the job socket, and one float32 request of `shape` sent on it.
  zmq::socket_t ConnectClient() {
    zmq::socket_t client(context_, zmq::socket_type::dealer);
    client.set(zmq::sockopt::linger, 0);
    client.connect(config_.endpoint);
    return client;
  }
  // Turns until a reply reaches `client` (`what` names it on failure): its frames, and its header
  // parsed.
  void AwaitReply(zmq::socket_t& client, const char* what, std::vector<zmq::message_t>* frames,
                  ReplyHeader* reply) {
    ASSERT_TRUE(TurnUntil([&] { return Readable(client); })) << what;
    ASSERT_TRUE(zmq::recv_multipart(client, std::back_inserter(*frames)));
    ASSERT_TRUE(ParseReplyHeader((*frames)[0].to_string_view(), reply).ok());
  }
  static void SendFloats(zmq::socket_t& client, const std::string& id,
                         const std::vector<int64_t>& shape, const std::vector<float>& values) {
    const json header = {{"v", 1},
                         {"id", id},
                         {"model", "mlp"},
                         {"inputs", {{{"dtype", "float32"}, {"shape", shape}}}}};
    client.send(zmq::buffer(header.dump()), zmq::send_flags::sndmore);
    client.send(zmq::buffer(values), zmq::send_flags::none);
  }
  json AdminCommand(const json& command) {
    zmq::socket_t admin(context_, zmq::socket_type::req);
    admin.set(zmq::sockopt::linger, 0);
    admin.connect(config_.admin_endpoint);
    admin.send(zmq::buffer(command.dump()), zmq::send_flags::none);
    json reply;
    TurnUntil([&] { return Readable(admin); });
    zmq::message_t message;
    if (Readable(admin) && admin.recv(message)) reply = json::parse(message.to_string());
    return reply;
  }

  std::filesystem::path dir_;
  FarmConfig config_;
  SyncedFakeClock clock_;
  FakeWorkerLauncher launcher_;
  zmq::context_t context_;
  std::unique_ptr<Supervisor> supervisor_;
};

TEST_F(SupervisorTurnTest, ARequestGoesThroughOneFarmTurnByTurnAndIsAnswered) {
  StartFarm();
  ASSERT_EQ(launcher_.launches().size(), 1u) << "Start launched the one worker, through the seam";
  const auto& launch = launcher_.last();
  EXPECT_EQ(launch.spec.args.model_name, "mlp");
  EXPECT_EQ(AdminCommand({{"cmd", "health"}}).value("ready", true), false)
      << "no worker is ready yet";

  // The worker's control channel: hello, then ready, as torchfarm-worker sends them.
  zmq::socket_t control = SayHelloAndReady(launch);
  // The loop reads hello and ready on its next turns.
  ASSERT_TRUE(TurnUntil([&] { return AdminCommand({{"cmd", "health"}}).value("ready", false); }));
  const json health = AdminCommand({{"cmd", "health"}});
  ASSERT_TRUE(health.value("ready", false)) << health.dump();
  EXPECT_EQ(health["models"][0]["ready_workers"], 1);

  zmq::socket_t client = ConnectClient();
  const std::vector<float> values = {1.5f, -2.0f, 3.0f, 4.0f};
  SendFloats(client, "r1", {2, 2}, values);

  std::unique_ptr<FakeWorker> worker;
  ASSERT_TRUE(FakeWorker::Open(launch, &worker).ok());
  ASSERT_TRUE(TurnUntil([&] { return worker->pending() > 0; })) << "the batch reached the ring";
  const std::vector<testing::FakeBatch> held = worker->Hold();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].Values<float>(0), values);
  EXPECT_EQ(worker->ServeAll(), 1);
  std::vector<zmq::message_t> frames;
  ReplyHeader reply;
  AwaitReply(client, "the answer came back", &frames, &reply);
  if (HasFatalFailure()) return;
  EXPECT_EQ(reply.id, "r1");
  ASSERT_TRUE(reply.status.ok()) << reply.status.ToString();
  ASSERT_EQ(frames.size(), 2u);
  const auto* out = frames[1].data<float>();
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{2.5f, -1.0f, 4.0f, 5.0f}));

  const json stats = AdminCommand({{"cmd", "stats"}});
  EXPECT_EQ(stats["workers"][0]["requests"], 1);
  EXPECT_EQ(stats["workers"][0]["batches"], 1);
  EXPECT_EQ(stats["workers"][0]["start"]["via"], "fake");

  // SIGTERM: the signalfd reads it on the next turn; with nothing queued the drain is over at
  // once and the workers are asked to stop.
  ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
  ASSERT_TRUE(TurnUntil([&] { return supervisor_->phase() == FarmPhase::kStoppingWorkers; }))
      << FarmPhaseName(supervisor_->phase());
  zmq::message_t stop;
  ASSERT_TRUE(TurnUntil([&] { return Readable(control); }));
  ASSERT_TRUE(control.recv(stop));
  EXPECT_EQ(json::parse(stop.to_string()).value("type", ""), ipc::kMsgStop);
}

// The maintenance duties skip turns that only move requests (supervisor.h). An unload whose last
// request finishes in such a turn (a doorbell, nothing else) must still stop the worker: the
// skipped turn arms the timer for the maintenance interval, and nothing else has to happen.
TEST_F(SupervisorTurnTest, AStopMadeDueByACollectedResponseIsSentWithoutAnotherEvent) {
  StartFarm();
  const auto& launch = launcher_.last();
  zmq::socket_t control = SayHelloAndReady(launch);
  ASSERT_TRUE(TurnUntil([&] { return AdminCommand({{"cmd", "health"}}).value("ready", false); }));

  zmq::socket_t client = ConnectClient();
  SendFloats(client, "last", {1, 2}, {1.0f, 2.0f});
  std::unique_ptr<FakeWorker> worker;
  ASSERT_TRUE(FakeWorker::Open(launch, &worker).ok());
  ASSERT_TRUE(TurnUntil([&] { return worker->pending() > 0; }));
  ASSERT_EQ(worker->Hold().size(), 1u);

  // Unloaded while its request is in the worker: the request is still answered, then the worker
  // is stopped.
  const json unload = AdminCommand({{"cmd", "unload"}, {"model", "mlp"}});
  ASSERT_TRUE(unload.value("ok", false)) << unload.dump();
  EXPECT_FALSE(Readable(control)) << "no stop while the worker holds a request";

  EXPECT_EQ(worker->ServeAll(), 1);
  std::vector<zmq::message_t> frames;
  ReplyHeader reply;
  AwaitReply(client, "the held request is answered", &frames, &reply);
  if (HasFatalFailure()) return;
  EXPECT_TRUE(reply.status.ok()) << reply.status.ToString();

  const auto answered = Clock::now();
  ASSERT_TRUE(TurnUntil([&] { return Readable(control); })) << "the worker is stopped";
  zmq::message_t stop;
  ASSERT_TRUE(control.recv(stop));
  EXPECT_EQ(json::parse(stop.to_string()).value("type", ""), ipc::kMsgStop);
  // Reported, not asserted (a loaded machine stretches turns): about the 5 ms interval.
  std::cout
      << "stop sent "
      << std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - answered).count()
      << " us after the answer\n";
}

TEST_F(SupervisorTurnTest, AnUnknownModelIsAnsweredNotFoundInTheSameTurn) {
  StartFarm();
  zmq::socket_t client = ConnectClient();
  const json header = {{"v", 1},
                       {"id", "x"},
                       {"model", "resnet"},
                       {"inputs", {{{"dtype", "float32"}, {"shape", {1, 2}}}}}};
  const std::vector<float> values = {1, 2};
  client.send(zmq::buffer(header.dump()), zmq::send_flags::sndmore);
  client.send(zmq::buffer(values), zmq::send_flags::none);
  std::vector<zmq::message_t> frames;
  ReplyHeader reply;
  AwaitReply(client, "a reply", &frames, &reply);
  if (HasFatalFailure()) return;
  EXPECT_EQ(reply.status.code(), StatusCode::kNotFound);
  EXPECT_NE(reply.status.message().find("resnet"), std::string::npos) << reply.status.message();
}

// Plays a FarmChannel on the supervisor's hub (supervisor/loop/frontend_hub.h): pushes messages
// with its identity first, as a channel does, and reads the replies the loop hands it.
class HubChannel {
 public:
  explicit HubChannel(FrontendHub* hub) : hub_(*hub), identity_(hub_.Attach(&replies_)) {}
  ~HubChannel() { hub_.Detach(identity_); }
  // [tag][call id][header][data...] (tests/frontend/hub_loop.h).
  void Push(std::vector<zmq::message_t> frames) {
    hub_.requests().Push(testing::FromFrames(identity_, std::move(frames)));
  }
  bool Readable() const { return replies_.size() > 0; }
  bool Receive(std::vector<zmq::message_t>* frames) { return replies_.Pop(frames); }

 private:
  FrontendHub& hub_;
  FrontendMailbox replies_;
  zmq::message_t identity_;
};

// A FarmChannel's message: [tag][call id][header][data].
void SendAsChannel(HubChannel& channel, const std::string& tag, const std::string& call_id,
                   const std::string& header) {
  const std::vector<float> values = {1, 2};
  std::vector<zmq::message_t> frames;
  frames.emplace_back(tag.data(), tag.size());
  frames.emplace_back(call_id.data(), call_id.size());
  frames.emplace_back(header.data(), header.size());
  if (tag != kMetaTag) frames.emplace_back(values.data(), values.size() * sizeof(float));
  channel.Push(std::move(frames));
}

// Issue 35 item 1: the loop answers every front-end message with its call id, also one whose
// header it cannot read (over limits.max_header_bytes, not JSON): no error reply is left
// without an id for the front end to drop.
TEST_F(SupervisorTurnTest, EveryFrontEndMessageIsAnsweredWithItsCallIdEvenAnUnreadableOne) {
  config_.frontend.http_endpoint = "127.0.0.1:0";
  StartFarm();
  HubChannel channel(supervisor_->frontend_hub());
  const std::string inputs = R"("inputs":[{"dtype":"float32","shape":[1,2]}]})";
  SendAsChannel(channel, "grpc ipv4:t", "41",
                R"({"v":1,"id":41,"model":")" + std::string(70'000, 'm') + "\"," + inputs);
  SendAsChannel(channel, "http t", "42", "not json");
  SendAsChannel(channel, "http t", "43", R"({"v":1,"id":43,"model":"resnet",)" + inputs);
  SendAsChannel(channel, kMetaTag, "44", R"({"id":44})");
  // No "id" in the header, and a shape the model does not take.
  SendAsChannel(channel, "http t", "45",
                R"({"v":1,"model":"mlp","inputs":[{"dtype":"float32","shape":[1,3]}]})");
  const std::vector<std::pair<uint64_t, StatusCode>> expected = {
      {41, StatusCode::kInvalidArgument},
      {42, StatusCode::kInvalidArgument},
      {43, StatusCode::kNotFound},
      {44, StatusCode::kOk},
      {45, StatusCode::kInvalidArgument}};
  for (const auto& [id, code] : expected) {
    ASSERT_TRUE(TurnUntil([&] { return channel.Readable(); })) << "no answer for call " << id;
    std::vector<zmq::message_t> frames;
    ASSERT_TRUE(channel.Receive(&frames));
    const json reply = json::parse(frames[0].to_string());
    EXPECT_EQ(reply["id"], id) << reply.dump().substr(0, 300);
    EXPECT_EQ(reply.value("status", ""), code == StatusCode::kOk ? "ok" : "error")
        << reply.dump().substr(0, 300);
    if (code != StatusCode::kOk) {
      EXPECT_EQ(reply.value("code", ""), StatusCodeName(code)) << reply.dump().substr(0, 300);
    }
  }
}

// Issue 33: the dashboard's status through the front ends' hub: models, workers and the event
// ring, what an HTTP client may see only: no config path, no model path.
TEST_F(SupervisorTurnTest, TheDashboardStatusHasModelsWorkersAndEventsAndNoPaths) {
  config_.frontend.http_endpoint = "127.0.0.1:0";
  StartFarm();
  const auto& launch = launcher_.last();
  zmq::socket_t control = SayHelloAndReady(launch);
  ASSERT_TRUE(TurnUntil([&] { return AdminCommand({{"cmd", "health"}}).value("ready", false); }));
  // Two admin actions: each is an event of the ring.
  EXPECT_TRUE(AdminCommand({{"cmd", "scale"}, {"model", "mlp"}, {"count", 2}}).value("ok", false));
  EXPECT_FALSE(AdminCommand({{"cmd", "scale"}, {"model", "nope"}, {"count", 2}}).value("ok", true));

  HubChannel channel(supervisor_->frontend_hub());
  auto ask = [&](const std::string& call_id, const json& query) {
    SendAsChannel(channel, kMetaTag, call_id, query.dump());
    json reply;
    if (!TurnUntil([&] { return channel.Readable(); })) return reply;
    std::vector<zmq::message_t> frames;
    if (!channel.Receive(&frames)) return reply;
    return json::parse(frames[0].to_string());
  };
  const json status = ask("51", {{"id", 51}, {"dashboard", true}});
  ASSERT_EQ(status.value("status", ""), "ok") << status.dump().substr(0, 300);
  EXPECT_EQ(status["id"], 51);
  ASSERT_EQ(status["models"].size(), 1u);
  const json& model = status["models"][0];
  EXPECT_EQ(model["name"], "mlp");
  EXPECT_EQ(model["ready_workers"], 1);
  EXPECT_EQ(model["workers"], 2) << "scaled to 2: one ready, one starting";
  EXPECT_TRUE(model.contains("errors_by_code"));
  EXPECT_TRUE(model["latency_us"].contains("total"));
  ASSERT_EQ(status["workers"].size(), 2u);
  for (const char* key : {"id", "state", "pid", "device", "restarts", "last_exit", "uptime_s",
                          "rss_bytes", "cpu_percent", "requests", "mean_batch_size", "inflight"}) {
    EXPECT_TRUE(status["workers"][0].contains(key)) << key;
  }
  EXPECT_EQ(status["totals"]["ready_workers"], 1);
  EXPECT_EQ(status["totals"]["workers"], 2);
  EXPECT_FALSE(status["supervisor"].contains("config")) << "the config file's path stays home";
  const std::string text = status.dump();
  EXPECT_EQ(text.find(dir_.string()), std::string::npos)
      << "no path of this farm's files in the status: " << text.substr(0, 500);
  EXPECT_EQ(text.find("path"), std::string::npos) << text.substr(0, 500);

  const json& events = status["events"];
  ASSERT_EQ(events.size(), 2u) << events.dump();
  EXPECT_EQ(events[0]["kind"], "scale");
  EXPECT_NE(events[0]["text"].get<std::string>().find("refused"), std::string::npos)
      << "newest first: the refused scale of an unknown model";
  EXPECT_EQ(events[1]["model"], "mlp");
  EXPECT_EQ(status["last_event"], events[0]["seq"]);

  const json later = ask(
      "52", {{"id", 52}, {"dashboard", true}, {"events_after", events[1]["seq"].get<uint64_t>()}});
  ASSERT_EQ(later["events"].size(), 1u) << "only what came after the reader's last event";
  EXPECT_EQ(later["events"][0]["seq"], events[0]["seq"]);
}

// A FarmChannel's typed message (farm_channel.h): [typed tag][call id][typed header][data];
// without `header` the message stops after the call id (what only a broken channel sends).
void SendTypedAsChannel(HubChannel& channel, const std::string& tag, const std::string& call_id,
                        std::optional<RequestHeader> header, const std::vector<float>& values) {
  std::vector<zmq::message_t> frames;
  frames.emplace_back(testing::kTypedTagPrefix + tag);
  frames.emplace_back(call_id.data(), call_id.size());
  if (header) frames.push_back(MakeTypedFrame(std::move(*header)));
  if (!values.empty()) frames.emplace_back(values.data(), values.size() * sizeof(float));
  channel.Push(std::move(frames));
}

// A reply through the hub: a typed reply header (the answer to a typed request) taken
// as it is, a text one parsed.
ReplyHeader ReplyFrom(zmq::message_t& frame) {
  ReplyHeader reply;
  if (const ReplyHeader* typed = TypedFrameValue<ReplyHeader>(frame)) {
    reply = *typed;
  } else {
    EXPECT_TRUE(ParseReplyHeader(frame.to_string_view(), &reply).ok()) << frame.to_string();
  }
  return reply;
}

RequestHeader TypedMlp(std::vector<int64_t> shape) {
  RequestHeader header;
  header.model = "mlp";
  header.inputs.push_back(TensorSpec{DType::kFloat32, std::move(shape)});
  header.input_names.push_back("INPUT__0");
  return header;
}

// The same request as the JSON header a FarmChannel sends (ToFarmRequest's fields).
std::string JsonMlp(const std::string& model, const std::string& version, int columns) {
  json header = {
      {"v", 1},
      {"model", model},
      {"inputs", {{{"name", "INPUT__0"}, {"dtype", "float32"}, {"shape", {1, columns}}}}}};
  if (!version.empty()) header["version"] = version;
  return header.dump();
}

// Issue 36: a typed request is refused with exactly the status its JSON twin gets (unknown model,
// a shape the model does not take, a version that is no version), and a typed message without a
// typed header is answered INTERNAL with its call id, never dropped, never read as a header.
TEST_F(SupervisorTurnTest, ATypedRequestIsRefusedAsItsJsonTwinAndABrokenOneIsAnswered) {
  config_.frontend.http_endpoint = "127.0.0.1:0";
  StartFarm();
  HubChannel channel(supervisor_->frontend_hub());
  RequestHeader resnet = TypedMlp({1, 2});
  resnet.model = "resnet";
  SendTypedAsChannel(channel, "http t", "61", resnet, {1, 2});
  SendAsChannel(channel, "http t", "62", JsonMlp("resnet", "", 2));
  SendTypedAsChannel(channel, "grpc ipv4:t", "63", TypedMlp({1, 3}), {1, 2});
  SendAsChannel(channel, "grpc ipv4:t", "64", JsonMlp("mlp", "", 3));
  RequestHeader bad_version = TypedMlp({1, 2});
  bad_version.version = "a b";
  SendTypedAsChannel(channel, "http t", "65", bad_version, {1, 2});
  SendAsChannel(channel, "http t", "66", JsonMlp("mlp", "a b", 2));
  // Tagged typed, with JSON text where the typed header belongs; then nothing after the call id.
  {
    std::vector<zmq::message_t> frames;
    frames.emplace_back(std::string(testing::kTypedTagPrefix) + "http t");
    frames.emplace_back(std::string("67"));
    frames.emplace_back(JsonMlp("mlp", "", 2));
    channel.Push(std::move(frames));
  }
  SendTypedAsChannel(channel, "http t", "68", std::nullopt, {});
  std::vector<ReplyHeader> replies;
  while (replies.size() < 8 && TurnUntil([&] { return channel.Readable(); })) {
    std::vector<zmq::message_t> frames;
    ASSERT_TRUE(channel.Receive(&frames));
    replies.push_back(ReplyFrom(frames[0]));
    // Typed requests get typed answers, JSON ones text.
    const bool odd_call = replies.size() % 2 == 1 && replies.size() < 7;
    EXPECT_EQ(TypedFrameValue<ReplyHeader>(frames[0]) != nullptr, odd_call || replies.size() >= 7)
        << "call " << 60 + replies.size();
  }
  ASSERT_EQ(replies.size(), 8u);
  for (size_t i = 0; i < replies.size(); ++i) EXPECT_EQ(replies[i].id, 61 + i) << i;
  EXPECT_EQ(replies[0].status.code(), StatusCode::kNotFound);
  EXPECT_EQ(replies[2].status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(replies[4].status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(replies[4].status.message().find("header field 'version'"), std::string::npos)
      << replies[4].status.message();
  for (size_t i : {0, 2, 4}) {
    EXPECT_EQ(replies[i].status.ToString(), replies[i + 1].status.ToString()) << "call " << 61 + i;
  }
  EXPECT_EQ(replies[6].status.code(), StatusCode::kInternal) << replies[6].status.ToString();
  EXPECT_EQ(replies[7].status.code(), StatusCode::kInternal) << replies[7].status.ToString();
}

// Issue 36: a typed request is served like any other: batched into the worker's ring with its
// bytes, answered through the hub with its call id.
TEST_F(SupervisorTurnTest, ATypedRequestIsServedAndAnsweredWithItsCallId) {
  config_.frontend.http_endpoint = "127.0.0.1:0";
  StartFarm();
  const auto& launch = launcher_.last();
  zmq::socket_t control = SayHelloAndReady(launch);
  ASSERT_TRUE(TurnUntil([&] { return AdminCommand({{"cmd", "health"}}).value("ready", false); }));

  HubChannel channel(supervisor_->frontend_hub());
  const std::vector<float> values = {1.5f, -2.0f, 3.0f, 4.0f};
  RequestHeader header = TypedMlp({2, 2});
  header.timeout_ms = 60'000;
  header.priority = 1;
  SendTypedAsChannel(channel, "grpc ipv4:t", "71", header, values);

  std::unique_ptr<FakeWorker> worker;
  ASSERT_TRUE(FakeWorker::Open(launch, &worker).ok());
  ASSERT_TRUE(TurnUntil([&] { return worker->pending() > 0; })) << "the batch reached the ring";
  const std::vector<testing::FakeBatch> held = worker->Hold();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].Values<float>(0), values);
  EXPECT_EQ(worker->ServeAll(), 1);
  ASSERT_TRUE(TurnUntil([&] { return channel.Readable(); })) << "the answer came back";
  std::vector<zmq::message_t> frames;
  ASSERT_TRUE(channel.Receive(&frames));
  ASSERT_NE(TypedFrameValue<ReplyHeader>(frames[0]), nullptr) << "a typed answer, no text";
  const ReplyHeader reply = ReplyFrom(frames[0]);
  EXPECT_EQ(reply.id, 71);
  EXPECT_EQ(reply.output_names, std::vector<std::string>{"OUTPUT__0"});
  ASSERT_EQ(reply.outputs.size(), 1u);
  EXPECT_EQ(reply.outputs[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_GE(reply.worker_id, 0);
  ASSERT_TRUE(reply.status.ok()) << reply.status.ToString();
  ASSERT_EQ(frames.size(), 2u);
  const auto* out = frames[1].data<float>();
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{2.5f, -1.0f, 4.0f, 5.0f}));
}

// frontend.client_id_header (supervisor/frontend/frontend_tag.h): a front-end request named
// "tenant-gold" counts under the same key as the ZeroMQ client whose routing id is "tenant-gold",
// over either protocol, typed or JSON, so limits.max_queued_per_client 1 refuses it while that
// client's request runs; an unnamed request (its connection) and another id are served.
TEST_F(SupervisorTurnTest, ANamedFrontEndClientSharesTheQuotaOfTheZeroMqClientOfThatId) {
  config_.frontend.http_endpoint = "127.0.0.1:0";
  config_.limits.max_queued_per_client = 1;
  StartFarm();
  const auto& launch = launcher_.last();
  zmq::socket_t control = SayHelloAndReady(launch);
  ASSERT_TRUE(TurnUntil([&] { return AdminCommand({{"cmd", "health"}}).value("ready", false); }));
  std::unique_ptr<FakeWorker> worker;
  ASSERT_TRUE(FakeWorker::Open(launch, &worker).ok());

  zmq::socket_t client(context_, zmq::socket_type::dealer);
  client.set(zmq::sockopt::linger, 0);
  client.set(zmq::sockopt::routing_id, "tenant-gold");
  client.connect(config_.endpoint);
  const std::vector<float> values = {1, 2};
  client.send(zmq::buffer(json{{"v", 1},
                               {"id", "z1"},
                               {"model", "mlp"},
                               {"inputs", {{{"dtype", "float32"}, {"shape", {1, 2}}}}}}
                              .dump()),
              zmq::send_flags::sndmore);
  client.send(zmq::buffer(values), zmq::send_flags::none);
  ASSERT_TRUE(TurnUntil([&] { return worker->pending() > 0; })) << "z1 runs, holding its quota";

  HubChannel channel(supervisor_->frontend_hub());
  auto next_reply = [&] {
    ReplyHeader reply;
    reply.id = "none";
    if (!TurnUntil([&] {
          worker->ServeAll();
          return channel.Readable();
        })) {
      return reply;
    }
    std::vector<zmq::message_t> frames;
    EXPECT_TRUE(channel.Receive(&frames));
    return ReplyFrom(frames[0]);
  };
  SendTypedAsChannel(channel, "http=tenant-gold", "81", TypedMlp({1, 2}), values);
  SendAsChannel(channel, "grpc=tenant-gold", "82", JsonMlp("mlp", "", 2));
  for (int call : {81, 82}) {
    ASSERT_TRUE(TurnUntil([&] { return channel.Readable(); })) << "call " << call;
    std::vector<zmq::message_t> frames;
    ASSERT_TRUE(channel.Receive(&frames));
    const ReplyHeader reply = ReplyFrom(frames[0]);
    EXPECT_EQ(reply.id, call);
    EXPECT_EQ(reply.status.code(), StatusCode::kResourceExhausted) << reply.status.ToString();
    EXPECT_NE(reply.status.message().find("this client already has 1 requests queued or running"),
              std::string::npos)
        << reply.status.message();
  }
  // Not the same client: a connection's key, and another id.
  SendTypedAsChannel(channel, "http 127.0.0.1:1", "83", TypedMlp({1, 2}), values);
  SendAsChannel(channel, "grpc=tenant-silver", "84", JsonMlp("mlp", "", 2));
  std::set<std::string> served;
  for (int i = 0; i < 2; ++i) {
    const ReplyHeader reply = next_reply();
    EXPECT_TRUE(reply.status.ok()) << reply.id.dump() << " " << reply.status.ToString();
    served.insert(reply.id.dump());
  }
  EXPECT_EQ(served, (std::set<std::string>{"83", "84"}));
  ASSERT_TRUE(TurnUntil([&] { return Readable(client); })) << "z1 was served too";
  std::vector<zmq::message_t> frames;
  ASSERT_TRUE(zmq::recv_multipart(client, std::back_inserter(frames)));
  // Its quota is free again: the named front-end request is served now.
  SendTypedAsChannel(channel, "http=tenant-gold", "85", TypedMlp({1, 2}), values);
  const ReplyHeader again = next_reply();
  EXPECT_EQ(again.id, 85);
  EXPECT_TRUE(again.status.ok()) << again.status.ToString();
}

}  // namespace
}  // namespace torchfarm
