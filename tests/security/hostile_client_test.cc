// Hostile clients against the real supervisor (docs/security.md): floods of malformed, truncated,
// oversize and random messages from several sockets, mixed with good traffic that must keep
// getting exactly the right answers while the supervisor's memory stays bounded; the per-client
// queue limit; socket modes; what a worker can see.
#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <regex>
#include <set>
#include <thread>
#include <zmq.hpp>

#include "security_util.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

#if defined(__SANITIZE_ADDRESS__)
// make test-asan: ASan's shadow memory and its quarantine of freed blocks (256 MiB at most) sit
// on top of the supervisor's own memory; bound the growth loosely instead.
constexpr int64_t kRssLimit = int64_t{192} << 20;
#else
constexpr int64_t kRssLimit = 64 << 20;
#endif

std::string GoodHeader(const json& id, int rows) {
  return json{{"v", 1},
              {"id", id},
              {"model", "identity"},
              {"inputs", json::array({{{"dtype", "int32"}, {"shape", {rows, 3}}}})}}
      .dump();
}

// One hostile message, picked by `kind`, with `rng` for the random parts.
std::vector<std::string> HostileMessage(int kind, std::mt19937& rng) {
  auto random_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  };
  std::string good = GoodHeader(7, 2);
  switch (kind) {
    case 0:
      return {random_bytes(rng() % 300)};  // garbage
    case 1:
      return {good.substr(0, rng() % good.size())};  // truncated header
    case 2:
      return {good, std::string(23, 'x')};  // wrong frame size
    case 3:
      return {good};  // missing frame
    case 4:
      return {std::string(70'000, '{')};  // oversize header
    case 5:
      return std::vector<std::string>(40, good);  // too many frames
    case 6:                                       // huge shape
      return {
          R"({"v":1,"model":"identity","inputs":[{"dtype":"int32","shape":[4611686018427387904,3]}]})",
          "x"};
    case 7:
      return {std::string(20'000, '[') + "1" + std::string(20'000, ']')};  // deep nesting
    case 8:                                                                // deep id
      return {R"({"v":1,"model":"identity","id":)" + std::string(10'000, '[') +
                  std::string(10'000, ']') + R"(,"inputs":[{"dtype":"int32","shape":[1,3]}]})",
              std::string(12, '\0')};
    case 9:
      return {GoodHeader(1, 2), random_bytes(300'000)};  // over the limits
    case 10:
      return {"\xff\xfe{\"v\":1}"};  // invalid UTF-8
    case 11:
      return {R"({"v":1,"model":"\xff\xfe","inputs":[{"dtype":"int32","shape":[1,3]}]})",
              "123456789012"};
    case 12:
      return {std::string()};  // empty header
    default:
      return {random_bytes(rng() % 64), random_bytes(rng() % 64), random_bytes(rng() % 64)};
  }
}
constexpr int kHostileKinds = 14;

void Hostile(const std::string& endpoint, int seed, int messages, std::atomic<int>* sent) {
  std::mt19937 rng(seed);
  zmq::context_t context(1);
  std::unique_ptr<zmq::socket_t> socket;
  for (int i = 0; i < messages; ++i) {
    // New connections now and then: fresh routing ids, half-read replies left behind.
    if (!socket || i % 200 == 0) {
      socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
      socket->set(zmq::sockopt::linger, 0);
      socket->set(zmq::sockopt::sndtimeo, 1000);
      socket->connect(endpoint);
    }
    auto frames = HostileMessage(static_cast<int>(rng() % kHostileKinds), rng);
    for (size_t f = 0; f < frames.size(); ++f) {
      auto flags = f + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (!socket->send(zmq::buffer(frames[f]), flags)) break;
    }
    ++*sent;
    zmq::message_t reply;
    while (socket->recv(reply, zmq::recv_flags::dontwait)) {
    }
  }
}

TEST(HostileClientTest, FloodOfBadMessagesLeavesGoodTrafficCorrectAndMemoryBounded) {
  Farm farm(json::array({IdentityModel(1)}),
            {{"limits", {{"max_request_bytes", 256 * 1024}, {"max_queued_per_client", 64}}}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  const int64_t rss_at_start = RssBytes(farm.pid());

  std::atomic<int> sent{0};
  std::atomic<bool> done{false};
  std::atomic<int64_t> peak_rss{rss_at_start};
  std::thread sampler([&] {
    while (!done) {
      int64_t rss = RssBytes(farm.pid());
      int64_t peak = peak_rss.load();
      while (rss > peak && !peak_rss.compare_exchange_weak(peak, rss)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::vector<std::thread> hostile;
  for (int t = 0; t < 4; ++t) {
    hostile.emplace_back(Hostile, farm.endpoint(), 1000 + t, 2500, &sent);
  }
  std::atomic<int> good_ok{0}, good_bad{0};
  std::vector<std::thread> good;
  for (int t = 0; t < 2; ++t) {
    good.emplace_back([&, t] {
      Client client(farm.endpoint(), 20'000);
      for (int i = 0; i < 150; ++i) {
        int rows = 1 + (i % 4);
        std::vector<int32_t> data(static_cast<size_t>(rows) * 3);
        for (size_t k = 0; k < data.size(); ++k)
          data[k] = t * 100000 + i * 10 + static_cast<int>(k);
        InferResult result;
        Status s = client.Infer(
            "identity", {TensorView{{DType::kInt32, {rows, 3}}, data.data(), data.size() * 4}},
            &result);
        bool right = s.ok() && result.outputs.size() == 1 &&
                     result.outputs[0].data ==
                         std::string(reinterpret_cast<const char*>(data.data()), data.size() * 4);
        (right ? good_ok : good_bad)++;
        if (!right) ADD_FAILURE() << "good request " << i << ": " << s.ToString();
      }
    });
  }
  for (auto& t : hostile) t.join();
  for (auto& t : good) t.join();
  done = true;
  sampler.join();

  EXPECT_EQ(good_ok, 300);
  EXPECT_EQ(good_bad, 0);
  EXPECT_EQ(sent, 10000);
  int status = 0;
  ASSERT_EQ(::waitpid(farm.pid(), &status, WNOHANG), 0) << "the supervisor died";
  EXPECT_LT(peak_rss.load(), kRssLimit) << "RSS at start " << rss_at_start;
  std::printf("supervisor RSS: %.1f MiB at start, %.1f MiB peak under %d hostile messages\n",
              rss_at_start / 1048576.0, peak_rss.load() / 1048576.0, sent.load());
  json health = farm.Admin("health");
  EXPECT_EQ(health.value("ready", false), true) << health.dump();
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(HostileClientTest, OneClientCannotTakeTheWholeQueue) {
  Farm farm(json::array({IdentityModel(1)}), {{"limits", {{"max_queued_per_client", 4}}}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  auto workers = farm.WorkerPids();
  ASSERT_EQ(workers.size(), 1u);
  ::kill(workers[0], SIGSTOP);  // nothing completes: requests stay queued or in flight

  std::vector<int32_t> row = {1, 2, 3};
  TensorView input{{DType::kInt32, {1, 3}}, row.data(), 12};
  Client noisy(farm.endpoint(), 10'000);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 10; ++i) {
    uint64_t id = 0;
    ASSERT_TRUE(noisy.Send("identity", {input}, {}, &id).ok());
    ids.push_back(id);
  }
  int refused = 0;
  for (int i = 0; i < 6; ++i) {
    InferResult result;
    uint64_t id = 0;
    Status s = noisy.Receive(&result, &id, 5'000);
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("limits.max_queued_per_client"));
    refused += s.code() == StatusCode::kResourceExhausted;
  }
  EXPECT_EQ(refused, 6);

  // Another client is still admitted while the noisy one is at its limit.
  Client quiet(farm.endpoint(), 10'000);
  uint64_t quiet_id = 0;
  ASSERT_TRUE(quiet.Send("identity", {input}, {}, &quiet_id).ok());
  ::kill(workers[0], SIGCONT);
  InferResult result;
  uint64_t id = 0;
  EXPECT_TRUE(quiet.Receive(&result, &id, 10'000).ok());
  for (int i = 0; i < 4; ++i) {
    Status s = noisy.Receive(&result, &id, 10'000);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  // Answered requests no longer count: the noisy client is admitted again.
  InferResult again;
  EXPECT_TRUE(noisy.Infer("identity", {input}, &again).ok());
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(HostileClientTest, NetworkEndpointWithoutCurveIsRefused) {
  const std::string endpoint = "tcp://0.0.0.0:" + std::to_string(FreePort());
  Farm farm(json::array({IdentityModel(1)}), {{"endpoint", endpoint}});
  ASSERT_TRUE(farm.Start());
  EXPECT_FALSE(farm.WaitReady(-1, 10'000));
  EXPECT_THAT(farm.error(), HasSubstr("exited early with status 512")) << "exit code 2";
  EXPECT_THAT(ReadFile(farm.dir() + "/supervisor.log"),
              HasSubstr("is reachable from the network but"));
}

TEST(HostileClientTest, InsecureNetworkEndpointStartsAndWarns) {
  const int port = FreePort();
  Farm farm(json::array({IdentityModel(1)}),
            {{"endpoint", "tcp://0.0.0.0:" + std::to_string(port)}, {"insecure", true}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  EXPECT_THAT(ReadFile(farm.dir() + "/supervisor.log"), HasSubstr("INSECURE"));
  Client client("tcp://127.0.0.1:" + std::to_string(port), 10'000);
  std::vector<int32_t> row = {1, 2, 3};
  InferResult result;
  EXPECT_TRUE(
      client.Infer("identity", {TensorView{{DType::kInt32, {1, 3}}, row.data(), 12}}, &result)
          .ok());
  EXPECT_EQ(farm.Stop(), 0);
}

unsigned ModeOf(const std::string& path, gid_t* gid = nullptr) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  if (gid) *gid = st.st_gid;
  return st.st_mode & 07777;
}

TEST(HostileClientTest, IpcSocketsAndRunDirAreOwnerOnly) {
  Farm farm(json::array({IdentityModel(1)}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  // umask 077: socket files come out 0700; what matters is that group and others get nothing.
  EXPECT_EQ(ModeOf(farm.dir() + "/jobs.sock") & 077, 0u);
  EXPECT_EQ(ModeOf(farm.dir() + "/run/admin.sock") & 077, 0u);
  EXPECT_EQ(ModeOf(farm.dir() + "/run"), 0700u);
  EXPECT_EQ(farm.Stop(), 0);
}

TEST(HostileClientTest, IpcGroupOpensTheJobSocketToThatGroup) {
  group* own = ::getgrgid(::getegid());
  ASSERT_NE(own, nullptr);
  Farm farm(json::array({IdentityModel(1)}), {{"ipc_group", own->gr_name}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  gid_t gid = 0;
  EXPECT_EQ(ModeOf(farm.dir() + "/jobs.sock", &gid), 0660u);
  EXPECT_EQ(gid, ::getegid());
  EXPECT_EQ(ModeOf(farm.dir() + "/run/admin.sock") & 077, 0u) << "the admin socket stays private";
  EXPECT_EQ(farm.Stop(), 0);
}

// The inode of the listening TCP socket on `port`, from /proc/net/tcp.
std::string ListeningInode(int port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  char hex_port[8];
  std::snprintf(hex_port, sizeof(hex_port), ":%04X", port);
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmit, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmit >> uid >> timeout >>
        inode;
    if (state == "0A" && local.size() > 5 && local.substr(local.size() - 5) == hex_port)
      return inode;
  }
  return "";
}

TEST(HostileClientTest, WorkersSeeOnlyTheirOwnSegmentAndNotTheJobSocket) {
  const int port = FreePort();
  Farm farm(json::array({IdentityModel(2)}),
            {{"endpoint", "tcp://127.0.0.1:" + std::to_string(port)}});
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  const std::string job_inode = ListeningInode(port);
  ASSERT_FALSE(job_inode.empty());
  const std::regex name("/dev/shm/(torchfarm-" + std::to_string(farm.pid()) +
                        "-[0-9a-f]{16}-w[0-9]+\\.[0-9]+)");
  std::set<std::string> all;
  for (pid_t worker : farm.WorkerPids()) {
    std::set<std::string> mapped;
    std::istringstream maps(ReadFile("/proc/" + std::to_string(worker) + "/maps"));
    std::string line;
    while (std::getline(maps, line)) {
      if (line.find("/dev/shm/") == std::string::npos) continue;
      std::smatch m;
      ASSERT_TRUE(std::regex_search(line, m, name)) << line;
      mapped.insert(m[1]);
    }
    EXPECT_EQ(mapped.size(), 1u) << "worker " << worker << " maps its own segment only";
    all.insert(mapped.begin(), mapped.end());
    for (const auto& fd :
         std::filesystem::directory_iterator("/proc/" + std::to_string(worker) + "/fd")) {
      std::error_code ec;
      auto target = std::filesystem::read_symlink(fd.path(), ec).string();
      EXPECT_NE(target, "socket:[" + job_inode + "]") << "worker inherited the job socket";
    }
  }
  EXPECT_EQ(all.size(), 2u);
  EXPECT_EQ(farm.Stop(), 0);
}

}  // namespace
}  // namespace torchfarm::testing
