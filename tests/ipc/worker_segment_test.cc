// WorkerSegment: creation mode and geometry, validation on open, unlink by the creator only.
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include <gtest/gtest.h>

#include "ipc/worker_segment.h"

namespace torchfarm::ipc {
namespace {

std::string UniqueSegmentName(const char* tag) {
  return "torchfarm-test-" + std::to_string(::getpid()) + "-" + tag;
}

TEST(WorkerSegment, CreatedOwnerOnlyAndUnlinkedByCreator) {
  std::string name = UniqueSegmentName("mode");
  {
    std::unique_ptr<WorkerSegment> segment;
    ASSERT_TRUE(WorkerSegment::Create(name, 2, 8192, &segment).ok());
    struct stat st{};
    ASSERT_EQ(::stat(("/dev/shm/" + name).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    {
      std::unique_ptr<WorkerSegment> opened;
      ASSERT_TRUE(WorkerSegment::Open(name, &opened).ok());
      EXPECT_EQ(opened->data_capacity(), segment->data_capacity());
      // Writes through one mapping are visible through the other.
      uint8_t* slot = segment->request_ring().TryReserve();
      std::memcpy(SlotData(slot), "hello", 5);
      segment->request_ring().Publish();
      const uint8_t* seen = opened->request_ring().Front();
      ASSERT_NE(seen, nullptr);
      EXPECT_EQ(std::memcmp(SlotData(seen), "hello", 5), 0);
    }
    EXPECT_TRUE(std::filesystem::exists("/dev/shm/" + name)) << "an opener must not unlink";
  }
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + name)) << "the creator unlinks";
}

TEST(WorkerSegment, OpenRejectsMissingAndForeignSegments) {
  std::unique_ptr<WorkerSegment> segment;
  Status s = WorkerSegment::Open(UniqueSegmentName("missing"), &segment);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot open"), std::string::npos) << s.message();

  std::string name = UniqueSegmentName("foreign");
  std::unique_ptr<WorkerSegment> owner;
  ASSERT_TRUE(WorkerSegment::Create(name, 1, 4096, &owner).ok());
  reinterpret_cast<SegmentHeader*>(owner->base())->layout_version = kLayoutVersion + 1;
  s = WorkerSegment::Open(name, &segment);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("layout version"), std::string::npos) << s.message();
  reinterpret_cast<SegmentHeader*>(owner->base())->magic = 42;
  s = WorkerSegment::Open(name, &segment);
  EXPECT_NE(s.message().find("magic"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace torchfarm::ipc
