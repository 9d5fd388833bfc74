// PrivateTempDir (worker/private_temp_dir.h): a worker's own scratch folder, and the sweep of the
// folders that killed workers left behind. Plain C++, real folders under a test-owned parent.
#include "worker/private_temp_dir.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace torchfarm::worker {
namespace {

namespace fs = std::filesystem;

class PrivateTempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    parent_ =
        fs::temp_directory_path() / ("torchfarm-private-tmp-test-" + std::to_string(::getpid()));
    fs::remove_all(parent_);
    fs::create_directories(parent_);
  }
  void TearDown() override { fs::remove_all(parent_); }

  // A pid that existed and has exited (and was reaped), so kill(pid, 0) answers ESRCH.
  static pid_t DeadPid() {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    ::waitpid(pid, nullptr, 0);
    return pid;
  }

  // A folder as a killed worker leaves it: an unpacked package inside.
  fs::path LeftBy(pid_t pid) {
    const fs::path dir = parent_ / ("torchfarm-worker-" + std::to_string(pid));
    fs::create_directories(dir / "aotinductor_abc123" / "data");
    std::ofstream(dir / "aotinductor_abc123" / "data" / "model.so") << "not really a library";
    return dir;
  }

  fs::path parent_;
};

TEST_F(PrivateTempDirTest, MakesAFolderOnlyThisUserCanEnterAndRemovesItWhenDone) {
  std::string path;
  {
    PrivateTempDir dir;
    ASSERT_TRUE(PrivateTempDir::Create(parent_.string(), 4242, &dir).ok());
    path = dir.path();
    EXPECT_EQ(path, (parent_ / "torchfarm-worker-4242").string());
    struct stat st {};
    ASSERT_EQ(::lstat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    std::ofstream(fs::path(path) / "file") << "x";
  }
  EXPECT_FALSE(fs::exists(path)) << "removed with what was in it";
}

TEST_F(PrivateTempDirTest, SweepsTheFoldersOfDeadWorkersOnly) {
  const fs::path dead = LeftBy(DeadPid());
  const fs::path alive = LeftBy(::getppid());          // the test runner's parent is alive
  const fs::path other = parent_ / "aotinductor_XYZ";  // not ours to judge
  const fs::path lookalike = parent_ / "torchfarm-worker-12x";
  fs::create_directories(other);
  fs::create_directories(lookalike);
  PrivateTempDir dir;
  ASSERT_TRUE(PrivateTempDir::Create(parent_.string(), ::getpid(), &dir).ok());
  EXPECT_EQ(dir.swept(), 1);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(alive));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_TRUE(fs::exists(lookalike));
}

TEST_F(PrivateTempDirTest, NeverFollowsOrRemovesASymlinkNamedLikeAWorkersFolder) {
  const fs::path target = parent_ / "precious";
  fs::create_directories(target);
  std::ofstream(target / "keep") << "x";
  const pid_t gone = DeadPid();
  fs::create_directory_symlink(target, parent_ / ("torchfarm-worker-" + std::to_string(gone)));
  PrivateTempDir dir;
  ASSERT_TRUE(PrivateTempDir::Create(parent_.string(), ::getpid(), &dir).ok());
  EXPECT_EQ(dir.swept(), 0);
  EXPECT_TRUE(fs::exists(target / "keep"));
}

TEST_F(PrivateTempDirTest, ANameSomeoneElseTookIsRefusedWithTheReason) {
  // A symlink where this worker's folder would be: mkdir fails and the folder is not "ours".
  fs::create_directory_symlink(parent_, parent_ / "torchfarm-worker-777");
  PrivateTempDir dir;
  Status s = PrivateTempDir::Create(parent_.string(), 777, &dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("torchfarm-worker-777"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("File exists"), std::string::npos) << s.message();
  EXPECT_TRUE(dir.path().empty());
}

TEST_F(PrivateTempDirTest, EnterSetsTmpdirForWhatTheWorkerLoadsNext) {
  const char* before = std::getenv("TMPDIR");
  const std::string saved = before != nullptr ? before : "";
  ::setenv("TMPDIR", parent_.c_str(), 1);
  {
    PrivateTempDir dir;
    ASSERT_TRUE(PrivateTempDir::Enter(&dir).ok());
    EXPECT_EQ(std::string(std::getenv("TMPDIR")), dir.path());
    EXPECT_EQ(fs::path(dir.path()).parent_path(), parent_);
  }
  if (before != nullptr) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
}

TEST(WorkerPidOfTempDirName, ReadsOnlyExactNames) {
  EXPECT_EQ(WorkerPidOfTempDirName("torchfarm-worker-123"), 123);
  EXPECT_EQ(WorkerPidOfTempDirName("torchfarm-worker-"), -1);
  EXPECT_EQ(WorkerPidOfTempDirName("torchfarm-worker-1a"), -1);
  EXPECT_EQ(WorkerPidOfTempDirName("torchfarm-worker-1234567890"), -1) << "over 9 digits";
  EXPECT_EQ(WorkerPidOfTempDirName("xtorchfarm-worker-1"), -1);
  EXPECT_EQ(WorkerPidOfTempDirName("aotinductor_abc"), -1);
}

}  // namespace
}  // namespace torchfarm::worker
