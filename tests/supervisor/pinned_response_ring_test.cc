// PinnedResponseRing: zero-copy reply frames keep their response slot from going back to the
// worker until libzmq frees them, slots go back strictly in ring order, and a segment stays
// mapped while a frame points into it, even after its worker slot let go of it.
#include "supervisor/pinned_response_ring.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <zmq.hpp>

namespace torchfarm {
namespace {

constexpr uint32_t kSlots = 4;
constexpr uint64_t kDataBytes = 4096;

std::string SegmentName(const char* test) {
  return "torchfarm-test-" + std::to_string(::getpid()) + "-" + test;
}

std::shared_ptr<ipc::WorkerSegment> MakeSegment(const char* test) {
  std::unique_ptr<ipc::WorkerSegment> segment;
  EXPECT_TRUE(ipc::WorkerSegment::Create(SegmentName(test), kSlots, kDataBytes, &segment).ok());
  return segment;
}

// What the worker does: fill the next response slot's data with `fill` and publish it.
bool Produce(const ipc::WorkerSegment& segment, char fill) {
  ipc::SpscRing ring = segment.response_ring();
  uint8_t* slot = ring.TryReserve();
  if (!slot) return false;
  std::memset(ipc::SlotData(slot), fill, kDataBytes);
  ring.Publish();
  return true;
}

TEST(PinnedResponseRingTest, UnpinnedResponsesGoBackAtOnce) {
  auto segment = MakeSegment("unpinned");
  PinnedResponseRing ring(segment);
  EXPECT_EQ(ring.Next(), nullptr);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(Produce(*segment, 'a'));
    ASSERT_NE(ring.Next(), nullptr);
    ring.Finish(TimePoint{});
    EXPECT_EQ(ring.unpopped(), 0u);
    EXPECT_EQ(segment->response_ring().Size(), 0u);
  }
}

TEST(PinnedResponseRingTest, APinnedSlotAndTheSlotsBehindItWaitForTheFrame) {
  auto segment = MakeSegment("pinned");
  PinnedResponseRing ring(segment);
  ASSERT_TRUE(Produce(*segment, 'a'));
  const uint8_t* first = ring.Next();
  zmq::message_t frame = ring.PinFrame(ipc::SlotData(first), 100);
  ring.Finish(TimePoint{});
  EXPECT_EQ(ring.unpopped(), 1u);

  ASSERT_TRUE(Produce(*segment, 'b'));
  ASSERT_NE(ring.Next(), nullptr);
  ring.Finish(TimePoint{});
  EXPECT_EQ(ring.unpopped(), 2u) << "ring order: the copied slot waits behind the pinned one";
  EXPECT_EQ(ring.ReleaseFreed(), 0u);
  EXPECT_EQ(static_cast<const uint8_t*>(frame.data())[0], 'a');

  frame = zmq::message_t();  // libzmq frees it: the free callback runs
  EXPECT_EQ(ring.ReleaseFreed(), 2u);
  EXPECT_EQ(ring.unpopped(), 0u);
  EXPECT_EQ(segment->response_ring().Size(), 0u);
}

TEST(PinnedResponseRingTest, ManyFramesOfOneSlotAllHaveToGo) {
  auto segment = MakeSegment("many");
  PinnedResponseRing ring(segment);
  ASSERT_TRUE(Produce(*segment, 'x'));
  const uint8_t* data = ipc::SlotData(ring.Next());
  std::vector<zmq::message_t> frames;
  for (int i = 0; i < 8; ++i) frames.push_back(ring.PinFrame(data + i * 64, 64));
  ring.Finish(TimePoint{});
  for (int i = 0; i < 7; ++i) {
    frames[i] = zmq::message_t();
    EXPECT_EQ(ring.ReleaseFreed(), 0u);
  }
  frames[7] = zmq::message_t();
  EXPECT_EQ(ring.ReleaseFreed(), 1u);
}

TEST(PinnedResponseRingTest, StuckMeansTheOldestPinOutlivedTheLimit) {
  auto segment = MakeSegment("stuck");
  PinnedResponseRing ring(segment);
  ASSERT_TRUE(Produce(*segment, 'a'));
  zmq::message_t frame = ring.PinFrame(ipc::SlotData(ring.Next()), 10);
  TimePoint t0{};
  ring.Finish(t0);
  EXPECT_FALSE(ring.Stuck(t0 + Millis(10), Millis(100)));
  EXPECT_TRUE(ring.Stuck(t0 + Millis(101), Millis(100)));
  frame = zmq::message_t();
  ring.ReleaseFreed();
  EXPECT_FALSE(ring.Stuck(t0 + Millis(1000), Millis(100)));
}

TEST(PinnedResponseRingTest, TheKeeperKeepsASegmentMappedUntilItsLastFrameIsSent) {
  const std::string name = SegmentName("keeper");
  PinnedRingKeeper keeper;
  zmq::context_t context(1);
  zmq::socket_t out(context, zmq::socket_type::pair), in(context, zmq::socket_type::pair);
  in.bind("inproc://pinned");
  out.connect("inproc://pinned");
  {
    auto segment = MakeSegment("keeper");
    auto ring = std::make_shared<PinnedResponseRing>(segment);
    keeper.Add(ring);
    ASSERT_TRUE(Produce(*segment, 'k'));
    zmq::message_t frame = ring->PinFrame(ipc::SlotData(ring->Next()), kDataBytes);
    ring->Finish(TimePoint{});
    ASSERT_TRUE(out.send(frame, zmq::send_flags::none));
    ipc::WorkerSegment::Remove(segment->name());  // what a worker exit does
  }  // the worker slot's references are gone; the frame is still queued
  keeper.ReleaseFreed();
  EXPECT_EQ(keeper.size(), 1u);
  EXPECT_TRUE(keeper.HasPins());
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + name));

  zmq::message_t got;
  ASSERT_TRUE(in.recv(got));
  ASSERT_EQ(got.size(), kDataBytes);
  EXPECT_EQ(std::string(static_cast<const char*>(got.data()), 4), "kkkk");
  got = zmq::message_t();
  // inproc hands the same message over: freeing the receiver's copy frees the pin.
  keeper.ReleaseFreed();
  EXPECT_FALSE(keeper.HasPins());
  EXPECT_EQ(keeper.size(), 0u);
}

}  // namespace
}  // namespace torchfarm
