// End-to-end tests: the real supervisor and workers, real TorchScript models written by
// torchfarm-mkmodel, real clients over ZeroMQ, real signals. Outputs are checked against a direct
// in-process forward() of the same model with the same thread settings.
#include <ATen/Parallel.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/script.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "farm_fixture.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;

json MlpModel(int workers, json extra = json::object()) {
  json m = {{"name", "mlp"},
            {"path", ModelDir() + "/mlp.pt"},
            {"inputs", json::array({{{"dtype", "float32"}, {"shape", {-1, 256}}}})},
            {"instances", json::array({{{"device", "cpu"}, {"count", workers}, {"threads", 1}}})}};
  for (auto& [k, v] : extra.items()) m[k] = v;
  return m;
}

json IdentityModel() {
  return {{"name", "identity"},
          {"path", ModelDir() + "/identity.pt"},
          {"inputs", json::array({{{"dtype", "int32"}, {"shape", {-1, 3}}}})},
          {"instances", json::array({{{"count", 1}}})}};
}

TensorView View(const at::Tensor& t) {
  TensorSpec spec{t.scalar_type() == at::kFloat ? DType::kFloat32 : DType::kInt32,
                  std::vector<int64_t>(t.sizes().begin(), t.sizes().end())};
  return TensorView{spec, t.data_ptr(), static_cast<size_t>(t.numel() * t.element_size())};
}

at::Tensor AsTensor(const Tensor& out) {
  EXPECT_EQ(out.spec.dtype, DType::kFloat32);
  return torch::from_blob(const_cast<char*>(out.data.data()), out.spec.shape, at::kFloat).clone();
}

// The reference: the same TorchScript file run in this process on one intra-op thread.
class Reference {
 public:
  explicit Reference(const std::string& path) : module_(torch::jit::load(path)) {
    at::set_num_threads(1);
    module_.eval();
  }
  at::Tensor Forward(const at::Tensor& x) {
    c10::InferenceMode guard;
    std::lock_guard<std::mutex> lock(mutex_);
    return module_.forward({x}).toTensor().clone();
  }

 private:
  torch::jit::Module module_;
  std::mutex mutex_;
};

TEST(EndToEnd, TwoWorkersServe1000RequestsFrom8ClientsWithExactResults) {
  Farm farm(json::array({MlpModel(2), IdentityModel()}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();

  // Inputs and expected outputs are prepared first, so the clients measure only the farm.
  constexpr int kClients = 8, kPerClient = 125;
  Reference reference(ModelDir() + "/mlp.pt");
  torch::manual_seed(1234);
  std::vector<at::Tensor> inputs, expected;
  for (int i = 0; i < kClients * kPerClient; ++i) {
    inputs.push_back(torch::randn({1, 256}));
    expected.push_back(reference.Forward(inputs.back()));
  }

  std::atomic<int> ok{0}, wrong{0}, failed{0};
  std::mutex workers_mutex;
  std::set<int> workers_seen;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      Client client(farm.endpoint(), 30'000);
      for (int k = 0; k < kPerClient; ++k) {
        int i = c * kPerClient + k;
        InferResult result;
        Status s = client.Infer("mlp", {View(inputs[i])}, &result);
        if (!s.ok() || result.outputs.size() != 1) {
          ++failed;
          ADD_FAILURE() << "request " << i << ": " << s.ToString();
          continue;
        }
        at::Tensor got = AsTensor(result.outputs[0]);
        if (got.sizes() == expected[i].sizes() && torch::equal(got, expected[i])) {
          ++ok;
        } else {
          ++wrong;
        }
        std::lock_guard<std::mutex> lock(workers_mutex);
        workers_seen.insert(result.header.worker_id);
      }
    });
  }
  // The identity model serves in the same farm at the same time.
  Client side(farm.endpoint());
  for (int i = 0; i < 20; ++i) {
    at::Tensor x = torch::randint(-1000, 1000, {i % 4 + 1, 3}, at::kInt);
    InferResult result;
    ASSERT_TRUE(side.Infer("identity", {View(x)}, &result).ok());
    ASSERT_EQ(result.outputs.size(), 1u);
    EXPECT_EQ(result.outputs[0].spec.shape, std::vector<int64_t>({i % 4 + 1, 3}));
    EXPECT_EQ(result.outputs[0].data,
              std::string(static_cast<const char*>(x.data_ptr()), x.numel() * 4));
  }
  for (auto& t : clients) t.join();

  EXPECT_EQ(ok.load(), kClients * kPerClient);
  EXPECT_EQ(wrong.load(), 0) << "outputs differing from the in-process forward";
  EXPECT_EQ(failed.load(), 0);
  std::set<int> mlp_workers(workers_seen.begin(), workers_seen.end());
  EXPECT_EQ(mlp_workers.size(), 2u) << "both mlp workers must have served requests";

  json stats = farm.Admin("stats");
  ASSERT_TRUE(stats.is_object());
  EXPECT_EQ(stats["models"][0]["requests"].get<int>(), kClients * kPerClient);
  EXPECT_EQ(farm.Stop(), 0);
}

// Sends raw frames on a DEALER socket and returns the parsed reply header.
json RawRequest(zmq::socket_t& socket, const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    socket.send(zmq::buffer(frames[i]),
                i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  zmq::message_t header;
  if (!socket.recv(header)) return nullptr;
  json reply = json::parse(header.to_string_view(), nullptr, false);
  while (header.more()) {
    zmq::message_t rest;
    if (!socket.recv(rest)) break;
    header = std::move(rest);
  }
  return reply;
}

TEST(EndToEnd, MalformedTrafficIsAnsweredAndLeavesTheFarmServing) {
  Farm farm(json::array({MlpModel(1, {{"slot_bytes", 65536}})}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  zmq::context_t context(1);
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvtimeo, 10'000);
  dealer.connect(farm.endpoint());

  std::string row(256 * 4, '\0');
  auto header = [](const std::string& model, json shape, std::string dtype = "float32") {
    return json{{"v", 1}, {"id", "x"}, {"model", model},
                {"inputs", json::array({{{"dtype", dtype}, {"shape", shape}}})}}.dump();
  };
  struct Case {
    std::vector<std::string> frames;
    std::string code;
    std::string words;
  };
  std::vector<Case> cases = {
      {{"this is not json", row}, "INVALID_ARGUMENT", "JSON"},
      {{"[1,2]", row}, "INVALID_ARGUMENT", "object"},
      {{header("nope", {1, 256}), row}, "NOT_FOUND", "nope"},
      {{header("mlp", {1, 256})}, "INVALID_ARGUMENT", "data frame"},
      {{header("mlp", {1, 256}), row, row}, "INVALID_ARGUMENT", "data frame"},
      {{header("mlp", {1, 256}), row.substr(1)}, "INVALID_ARGUMENT", "1024 bytes"},
      {{header("mlp", {1, 256}, "float64"), row + row}, "INVALID_ARGUMENT", "expected float32"},
      {{header("mlp", {256}), row}, "INVALID_ARGUMENT", "rank"},
      {{header("mlp", {1, 128}), row.substr(512)}, "INVALID_ARGUMENT", "got float32 [1, 128]"},
      {{header("mlp", {100, 256}, "float32"), std::string(100 * 1024, '\0')}, "RESOURCE_EXHAUSTED", "65536"},
      {{header("mlp", {1, 256}, "complex64"), row}, "INVALID_ARGUMENT", "complex64"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    json reply = RawRequest(dealer, cases[i].frames);
    ASSERT_TRUE(reply.is_object()) << "case " << i << " got no reply";
    EXPECT_EQ(reply["status"], "error") << "case " << i;
    EXPECT_EQ(reply["code"], cases[i].code) << "case " << i << ": " << reply.dump();
    EXPECT_NE(reply["message"].get<std::string>().find(cases[i].words), std::string::npos)
        << "case " << i << ": " << reply["message"];
  }

  // A REQ client (with its empty delimiter frame) is served like a DEALER.
  zmq::socket_t req(context, zmq::socket_type::req);
  req.set(zmq::sockopt::linger, 0);
  req.set(zmq::sockopt::rcvtimeo, 10'000);
  req.connect(farm.endpoint());
  json reply = RawRequest(req, {header("mlp", {1, 256}), row});
  ASSERT_TRUE(reply.is_object());
  EXPECT_EQ(reply["status"], "ok") << reply.dump();
  EXPECT_EQ(reply["outputs"][0]["shape"], json({1, 128}));
  EXPECT_EQ(reply["id"], "x");

  EXPECT_EQ(farm.Stop(), 0);
}

TEST(EndToEnd, ExceptionInForwardFailsOnlyThatJob) {
  json loose = MlpModel(1);
  loose["inputs"] = json::array({{{"dtype", "float32"}, {"shape", {-1, -1}}}});
  Farm farm(json::array({loose}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  Client client(farm.endpoint(), 20'000);
  at::Tensor bad = torch::ones({1, 10});
  InferResult result;
  Status s = client.Infer("mlp", {View(bad)}, &result);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_NE(s.message().find("forward"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("256"), std::string::npos) << "the torch message names the shapes: " << s.message();

  Reference reference(ModelDir() + "/mlp.pt");
  at::Tensor good = torch::randn({3, 256});
  s = client.Infer("mlp", {View(good)}, &result);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(torch::equal(AsTensor(result.outputs[0]), reference.Forward(good)));
  json stats = farm.Admin("stats");
  EXPECT_EQ(stats["workers"][0]["restarts"], 0) << "the worker survived the exception";
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(EndToEnd, ModelThatCannotLoadBacksOffFailsAndIsUnavailableWithTheReason) {
  std::string broken = "/tmp/torchfarm-broken-" + std::to_string(::getpid()) + ".pt";
  std::ofstream(broken) << "this is not a TorchScript archive";
  json bad = MlpModel(1);
  bad["name"] = "broken";
  bad["path"] = broken;
  Farm farm(json::array({MlpModel(1), bad}));
  ASSERT_TRUE(farm.Start());
  // Restarts back off (100 ms doubling) until more than 5 in 60 s mark the slot failed.
  json worker;
  for (int i = 0; i < 200; ++i) {
    json stats = farm.Admin("stats");
    if (stats.is_object() && stats["workers"][1]["state"] == "failed") {
      worker = stats["workers"][1];
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(worker.is_object()) << "the broken model's slot never reached failed";
  EXPECT_GE(worker["restarts"].get<int>(), 5);

  Client client(farm.endpoint(), 10'000);
  at::Tensor x = torch::randn({1, 256});
  InferResult result;
  Status s = client.Infer("broken", {View(x)}, &result);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("cannot load"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(broken), std::string::npos) << s.message();
  // The supervisor and the healthy model are unaffected.
  EXPECT_TRUE(client.Infer("mlp", {View(x)}, &result).ok());
  EXPECT_EQ(farm.Stop(), 0);
  std::filesystem::remove(broken);
}

TEST(Batching, ThirtyTwoClientsShareBatchesAndEachGetsItsOwnRows) {
  Farm farm(json::array({MlpModel(1, {{"max_batch_size", 16}, {"max_queue_delay_us", 2000}})}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  constexpr int kClients = 32, kPerClient = 20;
  Reference reference(ModelDir() + "/mlp.pt");
  std::vector<at::Tensor> inputs, expected;
  torch::manual_seed(99);
  for (int i = 0; i < kClients * kPerClient; ++i) {
    inputs.push_back(torch::randn({1, 256}));
    expected.push_back(reference.Forward(inputs.back()));
  }
  std::atomic<int> ok{0}, wrong{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      Client client(farm.endpoint(), 30'000);
      for (int k = 0; k < kPerClient; ++k) {
        int i = c * kPerClient + k;
        InferResult result;
        Status s = client.Infer("mlp", {View(inputs[i])}, &result);
        // A batch runs other GEMM kernels than a single row: equal to float rounding, not bits.
        if (s.ok() && result.outputs.size() == 1 &&
            torch::allclose(AsTensor(result.outputs[0]), expected[i], 1e-4, 1e-5)) {
          ++ok;
        } else {
          ++wrong;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), kClients * kPerClient);
  EXPECT_EQ(wrong.load(), 0);
  json stats = farm.Admin("stats");
  double mean = stats["models"][0]["mean_batch_size"].get<double>();
  EXPECT_GT(mean, 1.5) << "32 concurrent clients should be merged into batches";
  EXPECT_EQ(farm.Stop(), 0);
}

uint64_t RssOf(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

TEST(Batching, OverloadBeyondTheQueueIsRefusedAtOnceAndMemoryStaysBounded) {
  json slow = MlpModel(1, {{"max_queue_size", 64}});
  slow["name"] = "slow";
  slow["path"] = ModelDir() + "/slow.pt";
  slow["inputs"] = json::array({{{"dtype", "float32"}, {"shape", {-1, 4}}}});
  Farm farm(json::array({slow}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  uint64_t rss_before = RssOf(farm.pid());
  // 4x max_queue_size at once, each ~2 ms of work: most must be refused, none buffered.
  Client client(farm.endpoint(), 60'000);
  at::Tensor x = torch::full({1, 4}, 50.0f);
  for (int i = 0; i < 256; ++i) {
    uint64_t id;
    ASSERT_TRUE(client.Send("slow", {View(x)}, {}, &id).ok());
  }
  int ok = 0, exhausted = 0, other = 0;
  for (int i = 0; i < 256; ++i) {
    InferResult result;
    uint64_t id = 0;
    Status s = client.Receive(&result, &id, 60'000);
    ASSERT_NE(id, 0u) << "every request is answered";
    if (s.ok() && torch::equal(AsTensor(result.outputs[0]), x)) ++ok;
    else if (s.code() == StatusCode::kResourceExhausted) ++exhausted;
    else ++other;
  }
  EXPECT_EQ(other, 0);
  EXPECT_GE(exhausted, 256 - 64 - 2 - 8) << "the surplus beyond the queue (and in-flight) is refused";
  EXPECT_GE(ok, 64) << "a full queue's worth is served";
  EXPECT_LT(RssOf(farm.pid()), rss_before + (16u << 20)) << "the supervisor did not buffer the surplus";
  json stats = farm.Admin("stats");
  EXPECT_EQ(stats["models"][0]["rejected"].get<int>(), exhausted);
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(Batching, RequestWhoseDeadlinePassesInTheQueueIsNeverRun) {
  json slow = MlpModel(1);
  slow["name"] = "slow";
  slow["path"] = ModelDir() + "/slow.pt";
  slow["inputs"] = json::array({{{"dtype", "float32"}, {"shape", {-1, 4}}}});
  slow["max_inflight_per_worker"] = 1;
  Farm farm(json::array({slow}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  Client busy(farm.endpoint(), 60'000);
  at::Tensor long_job = torch::full({1, 4}, 20'000.0f);  // ~1 s of work
  uint64_t id;
  ASSERT_TRUE(busy.Send("slow", {View(long_job)}, {}, &id).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Client client(farm.endpoint(), 10'000);
  at::Tensor x = torch::ones({1, 4});
  InferResult result;
  InferOptions options;
  options.timeout_ms = 200;
  auto start = std::chrono::steady_clock::now();
  Status s = client.Infer("slow", {View(x)}, &result, options);
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_LT(waited, std::chrono::milliseconds(800)) << "answered when the deadline passed";
  InferResult first;
  EXPECT_TRUE(busy.Receive(&first, &id, 30'000).ok());
  json stats = farm.Admin("stats");
  EXPECT_EQ(stats["workers"][0]["batches"], 1) << "the expired request never ran";
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(Faults, KilledWorkerIsRestartedAndNoRequestIsLost) {
  Farm farm(json::array({MlpModel(2)}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  Reference reference(ModelDir() + "/mlp.pt");
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&] {
      Client client(farm.endpoint(), 30'000);
      while (!stop) {
        at::Tensor x = torch::randn({2, 256});
        InferResult result;
        Status s = client.Infer("mlp", {View(x)}, &result);
        if (s.ok() && torch::equal(AsTensor(result.outputs[0]), reference.Forward(x))) {
          ++ok;
        } else {
          ++failed;
          ADD_FAILURE() << s.ToString();
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<pid_t> before = farm.WorkerPids();
  ASSERT_EQ(before.size(), 2u);
  ASSERT_EQ(::kill(before[0], SIGKILL), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  ASSERT_TRUE(farm.WaitReady(-1, 20'000)) << "the killed worker is replaced";
  json stats = farm.Admin("stats");
  EXPECT_EQ(stats["workers"][0]["restarts"], 1);
  EXPECT_NE(stats["workers"][0]["pid"].get<pid_t>(), before[0]);
  EXPECT_NE(stats["workers"][0]["last_exit"].get<std::string>().find("SIGKILL"), std::string::npos);
  EXPECT_EQ(farm.Stop(), 0);
}

bool SegmentsOf(pid_t supervisor) {
  std::string prefix = "torchfarm-" + std::to_string(supervisor) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) return true;
  }
  return false;
}

TEST(Lifecycle, SigtermAnswersEverythingAcceptedAndLeavesNoSegments) {
  Farm farm(json::array({MlpModel(2)}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  pid_t pid = farm.pid();
  EXPECT_TRUE(SegmentsOf(pid));
  // Pipeline 200 requests, then stop the farm while they are queued.
  Client client(farm.endpoint(), 30'000);
  at::Tensor x = torch::randn({1, 256});
  for (int i = 0; i < 200; ++i) {
    uint64_t id;
    ASSERT_TRUE(client.Send("mlp", {View(x)}, {}, &id).ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(pid, SIGTERM);
  int answered = 0, ok = 0;
  for (int i = 0; i < 200; ++i) {
    InferResult result;
    uint64_t id = 0;
    Status s = client.Receive(&result, &id, 20'000);
    if (id == 0) break;
    ++answered;
    ok += s.ok();
  }
  EXPECT_EQ(answered, 200) << "every accepted request gets an answer";
  EXPECT_EQ(ok, 200) << "queued requests finish during the drain";
  EXPECT_EQ(farm.Stop(), 0);
  EXPECT_FALSE(SegmentsOf(pid)) << "no shared-memory segment outlives the supervisor";
}

TEST(Lifecycle, SecondSupervisorOnTheSameRunDirIsRefused) {
  Farm farm(json::array({MlpModel(1)}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  std::string cmd = BinDir() + "/torchfarm-supervisor --config " + farm.dir() + "/config.json 2>" +
                    farm.dir() + "/second.log";
  int status = std::system(cmd.c_str());
  EXPECT_NE(WEXITSTATUS(status), 0);
  std::ifstream log(farm.dir() + "/second.log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("owned by a live supervisor (pid " + std::to_string(farm.pid())), std::string::npos) << text;
  EXPECT_EQ(farm.Stop(), 0);
}

}  // namespace
}  // namespace torchfarm::testing
