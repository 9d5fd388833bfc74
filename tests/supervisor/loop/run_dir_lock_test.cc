// RunDirLock's checks of the folder it is given: created 0700, refused when group or others may
// write to it or when another user owns it.
#include "supervisor/loop/run_dir_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace torchfarm {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class RunDirLockTest : public ::testing::Test {
 protected:
  RunDirLockTest() : base_("/tmp/tf-rundir-" + std::to_string(::getpid())) {
    fs::remove_all(base_);
    fs::create_directories(base_);
  }
  ~RunDirLockTest() override { fs::remove_all(base_); }
  std::string base_;
};

TEST_F(RunDirLockTest, CreatedFolderIsOwnerOnly) {
  ::umask(022);  // the lock sets 0700 itself, whatever the umask
  RunDirLock lock;
  std::string dir = base_ + "/run";
  ASSERT_TRUE(lock.Acquire(dir).ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

TEST_F(RunDirLockTest, GroupOrWorldWritableFolderIsRefused) {
  std::string dir = base_ + "/shared";
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0777);
  RunDirLock lock;
  Status s = lock.Acquire(dir);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("has mode 0777: group or others may write to it; chmod 700"));
  ::chmod(dir.c_str(), 0755);  // readable by others is the operator's choice
  EXPECT_TRUE(lock.Acquire(dir).ok());
}

TEST_F(RunDirLockTest, SymlinkIsRefused) {
  std::string real = base_ + "/real", link = base_ + "/link";
  fs::create_directories(real);
  ::chmod(real.c_str(), 0700);
  fs::create_directory_symlink(real, link);
  RunDirLock lock;
  Status s = lock.Acquire(link);
  EXPECT_THAT(s.message(), HasSubstr("is not a directory (a symbolic link"));
}

TEST_F(RunDirLockTest, FolderOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a folder another user owns";
  std::string dir = base_ + "/theirs";
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  RunDirLock lock;
  Status s = lock.Acquire(dir);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is owned by uid 65534, not by this user"));
}

}  // namespace
}  // namespace torchfarm
