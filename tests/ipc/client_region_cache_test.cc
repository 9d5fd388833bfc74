// SharedRegion and the worker's ClientRegionCache, with real POSIX shared-memory objects.
#include "ipc/client_region_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
  ASSERT_TRUE(cache.Get(Ref(*region), &first).ok());
  ASSERT_TRUE(cache.Get(Ref(*region), &second).ok());
  EXPECT_EQ(first, second);
  EXPECT_EQ(cache.size(), 1u);
  region->data()[5] = 9;
  EXPECT_EQ(first->data()[5], 9);
  ClientRegionRef wrong = Ref(*region);
  wrong.bytes = 8192;
  ClientRegionCache other;
  Status s = other.Get(wrong, &first);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("has 4096 bytes, the supervisor mapped 8192"));
  ClientRegionRef missing{};
  std::strcpy(missing.name, "/torchfarm-no-such-region");
  EXPECT_EQ(other.Get(missing, &first).code(), StatusCode::kNotFound);
}

TEST(ClientRegionCache, TrimDropsRemovedRegionsThenTheLeastRecentlyUsed) {
  std::vector<std::unique_ptr<SharedRegion>> regions(4);
  for (size_t i = 0; i < regions.size(); ++i) {
    ASSERT_TRUE(SharedRegion::Create(Name("t" + std::to_string(i)), 4096, 0600, -1, &regions[i]).ok());
  }
  ClientRegionCache cache(/*capacity=*/2);
  SharedRegion* mapped = nullptr;
  for (const auto& region : regions) ASSERT_TRUE(cache.Get(Ref(*region), &mapped).ok());
  EXPECT_EQ(cache.size(), 4u) << "nothing is unmapped outside Trim";
  ASSERT_TRUE(cache.Get(Ref(*regions[0]), &mapped).ok());  // 0 is now the most recent
  regions[3].reset();                                        // removed by its creator
  EXPECT_EQ(cache.Trim(), 2);                                // 3 (gone), then 1 (oldest)
  EXPECT_EQ(cache.size(), 2u);
  SharedRegion* again = nullptr;
  ASSERT_TRUE(cache.Get(Ref(*regions[0]), &again).ok());
  EXPECT_EQ(again, mapped) << "the recently used mapping survived";
}

}  // namespace
}  // namespace torchfarm::ipc
