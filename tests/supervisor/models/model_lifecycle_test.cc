// The pure parts of run-time load/unload and watch mode: the lifecycle state `ctl models` shows
// (model_lifecycle.h) and the stat()-based change detection of model_repository_poll_s
// (file_watch.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "supervisor/models/file_watch.h"
#include "supervisor/models/model_lifecycle.h"

namespace torchfarm {
namespace {

TEST(ModelLifecycle, StatesFromCounts) {
  EXPECT_EQ(LifecycleOf(false, false, {0, 2}), ModelLifecycle::kLoading);
  EXPECT_EQ(LifecycleOf(false, false, {1, 1}), ModelLifecycle::kAvailable);
  EXPECT_EQ(LifecycleOf(false, false, {0, 0}), ModelLifecycle::kUnavailable);
  // A rollout keeps serving with the old workers: it says so rather than "available".
  EXPECT_EQ(LifecycleOf(false, true, {2, 1}), ModelLifecycle::kRolling);
  // Unloading wins over everything: the model takes no new requests whatever its workers do.
  EXPECT_EQ(LifecycleOf(true, true, {2, 0}), ModelLifecycle::kUnloading);
  EXPECT_STREQ(ModelLifecycleName(ModelLifecycle::kUnloading), "unloading");
  EXPECT_STREQ(ModelLifecycleName(ModelLifecycle::kLoading), "loading");
}

class FileWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tf_file_watch_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/model.pt";
  }
  void TearDown() override {
    std::remove(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  void Write(const std::string& text) { std::ofstream(path_, std::ios::trunc) << text; }
  // Moves the file's mtime explicitly: two writes within one timestamp tick look the same.
  void SetMtime(time_t seconds) {
    struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path_.c_str(), times, 0), 0);
  }
  std::string dir_, path_;
};

TEST_F(FileWatchTest, FirstScanRemembersLaterScansReportChanges) {
  Write("abc");
  SetMtime(1000);
  FileWatch watch;
  EXPECT_TRUE(watch.Scan({path_}).empty()) << "the first scan only remembers";
  EXPECT_TRUE(watch.Scan({path_}).empty()) << "nothing changed";
  SetMtime(2000);  // touched, same size
  auto changed = watch.Scan({path_});
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0], path_ + ": size 3 -> 3, mtime changed");
  EXPECT_TRUE(watch.Scan({path_}).empty()) << "reported once";
  Write("abcdef");
  SetMtime(2000);  // same mtime, other size
  changed = watch.Scan({path_});
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0], path_ + ": size 3 -> 6");
}

TEST_F(FileWatchTest, MissingFileAndItsReturnAreChanges) {
  Write("abc");
  FileWatch watch;
  watch.Scan({path_});
  std::remove(path_.c_str());
  auto changed = watch.Scan({path_});
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_NE(changed[0].find("size 3 -> missing"), std::string::npos) << changed[0];
  Write("xy");
  changed = watch.Scan({path_});
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_NE(changed[0].find("size missing -> 2"), std::string::npos) << changed[0];
}

TEST_F(FileWatchTest, PathsNoLongerListedAreForgotten) {
  Write("abc");
  FileWatch watch;
  watch.Scan({path_});
  watch.Scan({});  // the model was unloaded
  Write("abcd");
  // Listed again (loaded again): remembered anew, not reported.
  EXPECT_TRUE(watch.Scan({path_}).empty());
}

}  // namespace
}  // namespace torchfarm
