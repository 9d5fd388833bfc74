#include "farm_fixture.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "supervisor/loop/run_dir_lock.h"

namespace torchfarm::testing {

namespace fs = std::filesystem;
using nlohmann::json;

std::string BinDir() { return TORCHFARM_BIN_DIR; }

const std::string& ModelDir() {
  static const std::string dir = [] {
    std::string d = "/tmp/torchfarm-test-models-" + std::to_string(::getpid());
    fs::create_directories(d);
    std::string cmd = BinDir() + "/torchfarm-mkmodel --all " + d + " > " + d + "/mkmodel.log 2>&1";
    if (std::system(cmd.c_str()) != 0) std::abort();
    std::atexit([] {
      std::error_code ec;
      fs::remove_all("/tmp/torchfarm-test-models-" + std::to_string(::getpid()), ec);
    });
    return d;
  }();
  return dir;
}

json ModelEntry(const std::string& name, const std::string& file, json shape, int workers,
                json extra) {
  json m = {{"name", name},
            {"path", ModelDir() + "/" + file},
            {"inputs", json::array({{{"dtype", "float32"}, {"shape", shape}}})},
            {"instances", json::array({{{"device", "cpu"}, {"count", workers}}})}};
  for (auto& [key, value] : extra.items()) m[key] = value;
  return m;
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (::send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
      char buffer[8192];
      ssize_t n;
      while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) {
        response.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  ::close(fd);
  return response;
}

double MetricValue(const std::string& text, const std::string& series) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

namespace {
std::atomic<int> g_farm_counter{0};

// Failed assertions so far in the running test (0 outside a test).
int FailedTestParts() {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  if (!test) return 0;
  int failed = 0;
  for (int i = 0; i < test->result()->total_part_count(); ++i) {
    failed += test->result()->GetTestPartResult(i).failed();
  }
  return failed;
}
}  // namespace

Farm::Farm(json models, json extra) : failures_at_start_(FailedTestParts()) {
  dir_ = "/tmp/tf-it-" + std::to_string(::getpid()) + "-" + std::to_string(g_farm_counter++);
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  endpoint_ = "ipc://" + dir_ + "/jobs.sock";
  admin_ = "ipc://" + dir_ + "/run/admin.sock";
  json config = {{"endpoint", endpoint_}, {"run_dir", dir_ + "/run"}, {"models", models},
                 {"heartbeat_ms", 200}};
  for (auto& [key, value] : extra.items()) {
    if (value.is_null()) {
      config.erase(key);
    } else {
      config[key] = value;
    }
  }
  config_path_ = dir_ + "/config.json";
  base_config_ = config;
  std::ofstream(config_path_) << config.dump(2);
}

void Farm::RewriteConfig(json models, json extra) {
  json config = base_config_;
  config["models"] = std::move(models);
  for (auto& [key, value] : extra.items()) config[key] = value;
  std::ofstream(config_path_ + ".tmp") << config.dump(2);
  fs::rename(config_path_ + ".tmp", config_path_);
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

Farm::~Farm() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  // A test that failed while this farm ran shows what the supervisor and its workers logged.
  if (FailedTestParts() > failures_at_start_) {
    std::ifstream log(dir_ + "/supervisor.log");
    std::string line;
    std::fprintf(stderr, "---- supervisor.log of the failed test ----\n");
    while (std::getline(log, line)) std::fprintf(stderr, "%s\n", line.c_str());
  }
  // A supervisor that did not exit on its own (SIGKILLed here or by the test) leaves its /dev/shm
  // segments behind; the sweep a supervisor runs at its own start removes them (and those of any
  // other dead supervisor), so the suite leaves /dev/shm as it found it (tests/CMakeLists.txt).
  RemoveStaleFiles(dir_ + "/run");
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

namespace {

// fork+exec of the supervisor on `config_path`, its stderr into `log_path`.
// `descriptor_limit` > 0: the supervisor runs as under `prlimit --nofile=N` (soft and hard).
pid_t SpawnSupervisor(const std::string& config_path, const std::string& log_path,
                      const std::vector<std::string>& extra_args,
                      const std::vector<std::string>& env, int descriptor_limit = 0) {
  std::vector<std::string> args = {BinDir() + "/torchfarm-supervisor", "--config", config_path,
                                   "--log-level", "info"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> environment = env;
  pid_t pid = ::fork();
  if (pid == 0) {
    for (auto& e : environment) ::putenv(e.data());
    FILE* f = std::freopen(log_path.c_str(), "w", stderr);
    (void)f;
    if (descriptor_limit > 0) {
      const rlimit files{static_cast<rlim_t>(descriptor_limit), static_cast<rlim_t>(descriptor_limit)};
      if (::setrlimit(RLIMIT_NOFILE, &files) != 0) ::_exit(126);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace

bool Farm::Start(const std::vector<std::string>& extra_args, const std::vector<std::string>& env) {
  pid_ = SpawnSupervisor(config_path_, dir_ + "/supervisor.log", extra_args, env, descriptor_limit_);
  return pid_ > 0;
}

int RunSupervisorToExit(const std::string& config_path, std::string* log, int timeout_ms) {
  const std::string log_path = config_path + ".run.log";
  pid_t pid = SpawnSupervisor(config_path, log_path, {}, {});
  if (pid <= 0) return -2000;
  int code = -1000;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (code == -1000 && std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (code == -1000) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    RemoveStaleFiles("");  // its segments only: the run_dir is the caller's to remove
  }
  std::ifstream in(log_path);
  log->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return code;
}

json Farm::Admin(const std::string& cmd, int timeout_ms) const {
  return AdminRequest(json{{"cmd", cmd}}, timeout_ms);
}

json Farm::AdminRequest(const json& request, int timeout_ms) const {
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::req);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, timeout_ms);
  socket.connect(admin_);
  socket.send(zmq::buffer(request.dump()), zmq::send_flags::none);
  zmq::message_t reply;
  if (!socket.recv(reply)) return nullptr;
  return json::parse(reply.to_string_view(), nullptr, false);
}

bool Farm::WaitReady(int min_ready, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      error_ = "supervisor exited early with status " + std::to_string(status);
      pid_ = -1;
      return false;
    }
    json health = Admin("health", 500);
    if (health.is_object() && health.contains("models")) {
      bool ok = true;
      for (const auto& m : health["models"]) {
        int want = min_ready < 0 ? m["workers"].get<int>() : min_ready;
        ok = ok && m["ready_workers"].get<int>() >= want;
      }
      if (ok) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  error_ = "not ready within " + std::to_string(timeout_ms) + " ms";
  return false;
}

int Farm::Stop(int timeout_ms) {
  if (pid_ <= 0) return -2000;
  ::kill(pid_, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return -WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1000;
}

bool Farm::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return true;
  pid_ = -1;
  error_ = WIFSIGNALED(status)
               ? "supervisor killed by signal " + std::to_string(WTERMSIG(status))
               : "supervisor exited with status " + std::to_string(WEXITSTATUS(status));
  return false;
}

std::vector<pid_t> Farm::WorkerPids() const {
  std::vector<pid_t> pids;
  json stats = Admin("stats");
  if (!stats.is_object()) return pids;
  for (const auto& w : stats["workers"]) pids.push_back(w["pid"].get<pid_t>());
  return pids;
}

}  // namespace torchfarm::testing
