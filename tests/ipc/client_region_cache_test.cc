// SharedRegion, GuardedCopy and the worker's ClientRegionCache, with real POSIX shared-memory
// objects.
#include "ipc/client_region_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ipc/guarded_copy.h"

namespace torchfarm::ipc {
namespace {

using ::testing::HasSubstr;

std::string Name(const std::string& tag) {
  return "/torchfarm-" + std::to_string(::getpid()) + "-cache-test-" + tag;
}

ClientRegionRef Ref(const SharedRegion& region) {
  ClientRegionRef ref{};
  std::strncpy(ref.name, region.name().c_str(), sizeof(ref.name) - 1);
  ref.bytes = region.size();
  return ref;
}

TEST(SharedRegion, CreatorOwnsTheNameOthersShareTheBytes) {
  std::unique_ptr<SharedRegion> created, opened;
  ASSERT_TRUE(SharedRegion::Create(Name("a"), 8192, 0640, -1, &created).ok());
  struct stat st {};
  ASSERT_EQ(::stat(("/dev/shm" + Name("a")).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_EQ(SharedRegion::Create(Name("a"), 8192, 0600, -1, &opened).code(),
            StatusCode::kResourceExhausted)
      << "an existing name is never taken over";
  ASSERT_TRUE(SharedRegion::Open(Name("a"), &opened).ok());
  created->data()[100] = 7;
  EXPECT_EQ(opened->data()[100], 7);
  opened.reset();  // an opener never unlinks
  EXPECT_EQ(::access(("/dev/shm" + Name("a")).c_str(), F_OK), 0);
  created.reset();
  EXPECT_NE(::access(("/dev/shm" + Name("a")).c_str(), F_OK), 0);
  Status s = SharedRegion::Open(Name("a"), &opened);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
}

TEST(ClientRegionCache, MapsOnceAndChecksTheSize) {
  std::unique_ptr<SharedRegion> region;
  ASSERT_TRUE(SharedRegion::Create(Name("b"), 4096, 0600, -1, &region).ok());
  ClientRegionCache cache;
  SharedRegion *first = nullptr, *second = nullptr;
  ASSERT_TRUE(cache.Acquire(Ref(*region), &first).ok());
  ASSERT_TRUE(cache.Acquire(Ref(*region), &second).ok());
  EXPECT_EQ(first, second);
  EXPECT_EQ(cache.size(), 1u);
  region->data()[5] = 9;
  EXPECT_EQ(first->data()[5], 9);
  ClientRegionRef wrong = Ref(*region);
  wrong.bytes = 8192;
  ClientRegionCache other;
  Status s = other.Acquire(wrong, &first);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument)
      << "its client resized it: its request's problem";
  EXPECT_THAT(s.message(), HasSubstr("has 4096 bytes, the supervisor mapped 8192"));
  ClientRegionRef missing{};
  std::strcpy(missing.name, "/torchfarm-no-such-region");
  EXPECT_EQ(other.Acquire(missing, &first).code(), StatusCode::kNotFound);
}

TEST(ClientRegionCache, TrimDropsUnusedRemovedRegionsThenTheLeastRecentlyUsed) {
  std::vector<std::unique_ptr<SharedRegion>> regions(4);
  for (size_t i = 0; i < regions.size(); ++i) {
    ASSERT_TRUE(SharedRegion::Create(Name("t" + std::to_string(i)), 4096, 0600, -1, &regions[i]).ok());
  }
  ClientRegionCache cache(/*capacity=*/1);
  std::vector<SharedRegion*> mapped(4);
  for (size_t i = 0; i < regions.size(); ++i) ASSERT_TRUE(cache.Acquire(Ref(*regions[i]), &mapped[i]).ok());
  // Every region is in use by a batch in flight: nothing goes, not even a removed one.
  regions[3].reset();
  EXPECT_EQ(cache.Trim(), 0);
  EXPECT_EQ(cache.size(), 4u);
  for (SharedRegion* region : mapped) cache.Release(region);
  SharedRegion* again = nullptr;
  ASSERT_TRUE(cache.Acquire(Ref(*regions[0]), &again).ok());  // 0: in use and most recent
  EXPECT_EQ(again, mapped[0]);
  EXPECT_EQ(cache.Trim(), 3) << "3 (name gone), then 1 and 2 (unused, beyond capacity)";
  EXPECT_EQ(cache.size(), 1u);
  cache.Release(again);
  regions[0].reset();
  EXPECT_EQ(cache.Trim(), 1);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(GuardedCopy, ATruncatedRegionFailsTheCopyInsteadOfKillingTheProcess) {
  InstallBusGuard();
  std::unique_ptr<SharedRegion> region;
  ASSERT_TRUE(SharedRegion::Create(Name("bus"), 1 << 20, 0600, -1, &region).ok());
  std::vector<uint8_t> buffer(1 << 20, 5);
  EXPECT_TRUE(GuardedCopy(region->data(), buffer.data(), buffer.size()));
  EXPECT_TRUE(region->Covers(0, 1 << 20));
  ASSERT_EQ(::truncate(("/dev/shm" + Name("bus")).c_str(), 4096), 0);
  EXPECT_EQ(region->CurrentSize(), 4096u);
  EXPECT_FALSE(region->Covers(0, 8192));
  EXPECT_TRUE(region->Covers(0, 4096));
  EXPECT_FALSE(GuardedCopy(buffer.data(), region->data(), buffer.size()));
  EXPECT_FALSE(GuardedCopy(region->data(), buffer.data(), buffer.size()));
  EXPECT_TRUE(GuardedCopy(buffer.data(), region->data(), 4096)) << "the part still there copies";
  EXPECT_EQ(buffer[0], 5);
}

}  // namespace
}  // namespace torchfarm::ipc
