// LaunchProcess: the child gets the mapped fds at their target numbers and nothing else the
// launcher opened (the copies it moves the sources through must not survive exec).
#include "supervisor/workers/process_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/unique_fd.h"

namespace torchfarm {
namespace {

namespace fs = std::filesystem;

std::set<int> OpenFds(const std::string& fd_dir) {
  std::set<int> fds;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fd_dir, ec)) {
    fds.insert(std::stoi(entry.path().filename().string()));
  }
  return fds;
}

// Waits until `pid` runs `comm` (it has exec'd), or false after two seconds.
bool WaitForExec(pid_t pid, const std::string& comm) {
  for (int i = 0; i < 200; ++i) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    if (std::getline(in, name) && name == comm) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(ProcessLauncherTest, TheChildHoldsStdioAndTheMappedFdsOnly) {
  int first[2], second[2];
  ASSERT_EQ(::pipe2(first, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(second, O_CLOEXEC), 0);
  UniqueFd a_read(first[0]), a_write(first[1]), b_read(second[0]), b_write(second[1]);
  // An fd this process holds without FD_CLOEXEC (as one inherited from a shell would be).
  UniqueFd inheritable(::open("/dev/null", O_RDONLY));
  ASSERT_TRUE(inheritable.valid());

  pid_t pid = -1;
  ASSERT_TRUE(
      LaunchProcess({"/bin/sleep", "30"}, {{a_read.get(), 3}, {b_write.get(), 4}}, &pid).ok());
  ASSERT_TRUE(WaitForExec(pid, "sleep"));
  std::set<int> child = OpenFds("/proc/" + std::to_string(pid) + "/fd");
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);

  EXPECT_EQ(child, std::set<int>({0, 1, 2, 3, 4}))
      << "the launcher's copies (fd 100 and up) and fd " << inheritable.get() << " must not leak";
}

}  // namespace
}  // namespace torchfarm
