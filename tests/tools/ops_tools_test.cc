// `torchfarm stats`, `ctl` and `top` as an operator runs them: the real CLI binary against a
// real farm (supervisor + workers), output captured in files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "farm_fixture.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

json MlpModel(int workers) {
  return {{"name", "mlp"},
          {"path", ModelDir() + "/mlp.pt"},
          {"inputs", json::array({{{"dtype", "float32"}, {"shape", {-1, 256}}}})},
          {"instances", json::array({{{"device", "cpu"}, {"count", workers}, {"threads", 1}}})}};
}

struct ToolRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs `torchfarm ARGS` with stdin from /dev/null and stdout/stderr into files under `dir`.
ToolRun RunTool(const std::string& dir, const std::string& args) {
  std::string out = dir + "/tool.out", err = dir + "/tool.err";
  std::string command = BinDir() + "/torchfarm " + args + " < /dev/null > " + out + " 2> " + err;
  int status = std::system(command.c_str());
  ToolRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = ReadFile(out);
  run.err = ReadFile(err);
  return run;
}

// What `torchfarm top` did on an 80x24 pseudo-terminal until `stop` (a key or a signal).
struct PtyRun {
  bool drew = false;  // the first frame arrived
  bool raw_while_running = false;
  bool canonical_after = false;  // the terminal's line mode is back
  int exit_code = -1;
  std::string screen;
};

// Reads the pty into `out` until `done(out)` or the child closes it or `timeout_ms` passes.
template <typename Done>
void ReadPty(int master, std::string* out, int timeout_ms, Done done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done(*out) && std::chrono::steady_clock::now() < deadline) {
    pollfd fd{master, POLLIN, 0};
    if (::poll(&fd, 1, 100) <= 0) continue;
    char buffer[4096];
    ssize_t n = ::read(master, buffer, sizeof buffer);
    if (n <= 0) return;  // EIO: the child is gone
    out->append(buffer, static_cast<size_t>(n));
  }
}

PtyRun RunTopOnPty(const std::string& admin_endpoint, const std::function<void(pid_t, int)>& stop) {
  PtyRun run;
  winsize size{};
  size.ws_col = 80;
  size.ws_row = 24;
  int master = -1;
  pid_t pid = ::forkpty(&master, nullptr, nullptr, &size);
  if (pid == 0) {
    std::string binary = BinDir() + "/torchfarm";
    ::execl(binary.c_str(), binary.c_str(), "top", "--admin", admin_endpoint.c_str(),
            "--interval-ms", "300", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  if (pid < 0) return run;
  ReadPty(master, &run.screen, 10'000,
          [](const std::string& s) { return s.find("(q quits)") != std::string::npos; });
  run.drew = run.screen.find("(q quits)") != std::string::npos;
  termios mode{};
  run.raw_while_running = ::tcgetattr(master, &mode) == 0 && !(mode.c_lflag & ICANON);
  stop(pid, master);
  ReadPty(master, &run.screen, 5'000, [](const std::string&) { return false; });
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  run.canonical_after = ::tcgetattr(master, &mode) == 0 && (mode.c_lflag & ICANON);
  ::close(master);
  return run;
}

class OpsToolsTest : public ::testing::Test {
 protected:
  static std::string AdminOf(const Farm& farm) { return "ipc://" + farm.dir() + "/run/admin.sock"; }
};

TEST_F(OpsToolsTest, StatsCtlHealthAndTopAgainstARealFarm) {
  Farm farm(json::array({MlpModel(2)}));
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  const std::string admin = "--admin " + AdminOf(farm);
  std::vector<pid_t> pids = farm.WorkerPids();
  ASSERT_EQ(pids.size(), 2u);

  // stats --json: the raw reply, one document.
  ToolRun stats = RunTool(farm.dir(), "stats --json " + admin);
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  json parsed = json::parse(stats.out, nullptr, false);
  ASSERT_TRUE(parsed.is_object()) << stats.out;
  EXPECT_EQ(parsed["workers"].size(), 2u);
  EXPECT_EQ(parsed["supervisor"]["pid"], farm.pid());

  // stats: the tables.
  ToolRun table = RunTool(farm.dir(), "stats " + admin);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("MODEL"));
  EXPECT_THAT(table.out, HasSubstr("mlp"));
  for (pid_t pid : pids) EXPECT_THAT(table.out, HasSubstr(std::to_string(pid)));

  // ctl health: a readiness probe.
  ToolRun health = RunTool(farm.dir(), "ctl " + admin + " health");
  EXPECT_EQ(health.exit_code, 0) << health.out << health.err;
  EXPECT_THAT(health.out, HasSubstr("live yes  ready yes"));
  EXPECT_THAT(health.out, HasSubstr("2/2 ready"));
  // Flags may follow the action too.
  EXPECT_EQ(RunTool(farm.dir(), "ctl health " + admin).exit_code, 0);

  // top with stdout in a file: plain snapshot blocks, no escapes, every worker's pid.
  ToolRun top = RunTool(farm.dir(), "top --iterations 2 --interval-ms 200 " + admin);
  ASSERT_EQ(top.exit_code, 0) << top.err;
  EXPECT_THAT(top.out, Not(HasSubstr("\x1b")));
  EXPECT_THAT(top.out, Not(HasSubstr("q quits")));
  size_t first = top.out.find("=== ");
  ASSERT_NE(first, std::string::npos);
  EXPECT_NE(top.out.find("=== ", first + 1), std::string::npos) << "two snapshot blocks";
  for (pid_t pid : pids) EXPECT_THAT(top.out, HasSubstr(std::to_string(pid)));
  EXPECT_THAT(top.out, HasSubstr("workers 2/2 ready"));

  // top on a terminal: full screen in raw mode; `q` and SIGTERM both quit and restore it.
  for (bool by_key : {true, false}) {
    PtyRun pty = RunTopOnPty(AdminOf(farm), [by_key](pid_t pid, int master) {
      if (by_key) {
        EXPECT_EQ(::write(master, "q", 1), 1);
      } else {
        ::kill(pid, SIGTERM);
      }
    });
    SCOPED_TRACE(by_key ? "quit with q" : "quit with SIGTERM");
    EXPECT_TRUE(pty.drew) << pty.screen;
    EXPECT_TRUE(pty.raw_while_running);
    EXPECT_EQ(pty.exit_code, 0);
    EXPECT_TRUE(pty.canonical_after);
    EXPECT_THAT(pty.screen, HasSubstr("\x1b[?1049h"));  // entered the alternate screen
    EXPECT_THAT(pty.screen, HasSubstr("\x1b[?1049l"));  // and left it
    for (pid_t pid : pids) EXPECT_THAT(pty.screen, HasSubstr(std::to_string(pid)));
  }

  // An action the supervisor refuses (no such worker, or an older supervisor without the
  // command): exit 1 with its error on stderr.
  ToolRun refused = RunTool(farm.dir(), "ctl " + admin + " restart 999");
  EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("error: "));
  ToolRun unknown_model = RunTool(farm.dir(), "ctl " + admin + " scale no-such-model 1");
  EXPECT_EQ(unknown_model.exit_code, 1) << unknown_model.out << unknown_model.err;

  // Once the farm is gone nothing answers: exit 3, for every tool.
  ASSERT_EQ(farm.Stop(), 0);
  ToolRun gone = RunTool(farm.dir(), "ctl " + admin + " --timeout-ms 300 health");
  EXPECT_EQ(gone.exit_code, 3);
  EXPECT_THAT(gone.err, HasSubstr("no answer from " + AdminOf(farm)));
  EXPECT_EQ(RunTool(farm.dir(), "stats --timeout-ms 300 " + admin).exit_code, 3);
  EXPECT_EQ(RunTool(farm.dir(), "top --iterations 1 --timeout-ms 300 " + admin).exit_code, 3);
}

TEST_F(OpsToolsTest, UsageErrorsExitTwo) {
  std::string dir = ::testing::TempDir();
  EXPECT_EQ(RunTool(dir, "ctl").exit_code, 2);
  EXPECT_EQ(RunTool(dir, "ctl restart").exit_code, 2);
  EXPECT_EQ(RunTool(dir, "ctl scale mlp -1").exit_code, 2);
  EXPECT_EQ(RunTool(dir, "top --interval-ms 5").exit_code, 2);
  EXPECT_EQ(RunTool(dir, "stats --admin nonsense://x").exit_code, 2);
}

}  // namespace
}  // namespace torchfarm::testing
