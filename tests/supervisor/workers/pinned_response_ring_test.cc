// PinnedResponseRing: zero-copy reply frames keep their response slot from going back to the
// worker until libzmq frees them, slots go back strictly in ring order, and a segment stays
// mapped while a frame points into it, even after its worker slot let go of it.
#include "supervisor/workers/pinned_response_ring.h"

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
    EXPECT_TRUE(keeper.HasLivePins()) << "a worker's ring: the loop polls for its pins";
    ipc::WorkerSegment::Remove(segment->name());  // what a worker exit does
  }  // the worker slot's references are gone; the frame is still queued
  keeper.ReleaseFreed();
  EXPECT_EQ(keeper.size(), 1u);
  EXPECT_TRUE(keeper.HasPins());
  EXPECT_FALSE(keeper.HasLivePins()) << "retired: its pins hold memory, no worker";
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

// A client that stops reading keeps a retired segment mapped; over the cap, rings copy their
// replies instead of pinning more segments, and pin again once the stuck replies are freed.
TEST(PinnedResponseRingTest, OverTheCapRepliesAreCopiedNotPinned) {
  PinnedRingKeeper keeper;
  zmq::message_t stuck;
  uint64_t segment_bytes = 0;
  {
    auto retired = MakeSegment("cap-retired");
    segment_bytes = retired->size();
    auto ring = std::make_shared<PinnedResponseRing>(retired);
    keeper.Add(ring);
    ASSERT_TRUE(Produce(*retired, 'r'));
    stuck = ring->PinFrame(ipc::SlotData(ring->Next()), 100);
    ring->Finish(TimePoint{});
    ipc::WorkerSegment::Remove(retired->name());
  }  // its worker was replaced: only the unread reply keeps the segment mapped
  keeper.set_cap_bytes(segment_bytes + segment_bytes / 2);
  keeper.ReleaseFreed();
  EXPECT_EQ(keeper.budget().retired_bytes, segment_bytes);

  auto live = MakeSegment("cap-live");
  auto ring = std::make_shared<PinnedResponseRing>(live);
  keeper.Add(ring);
  ASSERT_TRUE(Produce(*live, 'c'));
  const uint8_t* data = ipc::SlotData(ring->Next());
  zmq::message_t copied = ring->PinFrame(data, 100);
  ring->Finish(TimePoint{});
  EXPECT_NE(copied.data(), static_cast<const void*>(data)) << "a second segment would pass the cap";
  EXPECT_EQ(static_cast<const uint8_t*>(copied.data())[0], 'c');
  EXPECT_EQ(ring->unpopped(), 0u) << "a copied reply gives its slot back at once";
  EXPECT_EQ(keeper.budget().copied_frames, 1u);

  stuck = zmq::message_t();  // the client read it (or went away)
  keeper.ReleaseFreed();
  EXPECT_EQ(keeper.budget().retired_bytes, 0u);
  EXPECT_EQ(keeper.size(), 1u);
  ASSERT_TRUE(Produce(*live, 'p'));
  data = ipc::SlotData(ring->Next());
  zmq::message_t pinned = ring->PinFrame(data, 100);
  ring->Finish(TimePoint{});
  EXPECT_EQ(static_cast<const uint8_t*>(pinned.data())[0], 'p');
  EXPECT_EQ(ring->unpopped(), 1u) << "pinned (into the segment's second mapping), not copied";
}

// A client that stops reading with a pinned reply in its pipe: the slot's bytes move to private
// memory under the message, the worker gets the slot back and overwrites it, the message still
// reads its own bytes, and once it is freed the pages pin again.
TEST(PinnedResponseRingTest, AStuckSlotIsDetachedAndTheWorkerReusesIt) {
  auto segment = MakeSegment("detach");
  PinnedRingKeeper keeper;
  auto ring = std::make_shared<PinnedResponseRing>(segment);
  keeper.Add(ring);
  FakeTimeSource clock;
  ASSERT_TRUE(Produce(*segment, 'a'));
  zmq::message_t stuck = ring->PinFrame(ipc::SlotData(ring->Next()), kDataBytes);
  ring->Finish(clock.Now());
  ASSERT_EQ(ring->unpopped(), 1u);
  EXPECT_FALSE(ring->DetachStuck(clock.Now(), Millis(50))) << "not stuck long enough yet";
  clock.Advance(Millis(51));
  ASSERT_TRUE(ring->DetachStuck(clock.Now(), Millis(50)));
  EXPECT_EQ(ring->detached(), 1u);
  ring->ReleaseFreed();
  EXPECT_EQ(ring->unpopped(), 0u) << "the slot went back to the worker";
  EXPECT_TRUE(keeper.HasPins()) << "the loop keeps looking for the detached message's free";

  // The worker goes round the whole ring, overwriting the stuck reply's slot.
  for (uint32_t i = 0; i < kSlots; ++i) {
    ASSERT_TRUE(Produce(*segment, static_cast<char>('b' + i)));
    const uint8_t* next = ring->Next();
    ASSERT_NE(next, nullptr);
    // Frames over the detached pages are copies; the others pin.
    zmq::message_t frame = ring->PinFrame(ipc::SlotData(next), kDataBytes);
    EXPECT_EQ(static_cast<const uint8_t*>(frame.data())[0], 'b' + i);
    ring->Finish(clock.Now());
    frame = zmq::message_t();
    ring->ReleaseFreed();
  }
  EXPECT_EQ(ring->unpopped(), 0u);
  const auto* bytes = static_cast<const uint8_t*>(stuck.data());
  for (uint64_t i = 0; i < kDataBytes; ++i) {
    ASSERT_EQ(bytes[i], 'a') << "the unread reply changed under libzmq at byte " << i;
  }
  stuck = zmq::message_t();  // the client reads at last
  keeper.ReleaseFreed();
  EXPECT_EQ(ring->detached(), 0u);
  // Mapped back: the slot's next reply pins (unpopped until its frame is freed) and reads true.
  ASSERT_TRUE(Produce(*segment, 'z'));
  zmq::message_t again = ring->PinFrame(ipc::SlotData(ring->Next()), kDataBytes);
  ring->Finish(clock.Now());
  EXPECT_EQ(static_cast<const uint8_t*>(again.data())[kDataBytes - 1], 'z');
  EXPECT_EQ(ring->unpopped(), 1u);
  again = zmq::message_t();
  ring->ReleaseFreed();
  EXPECT_EQ(ring->unpopped(), 0u);
}

// Two readers stop at once with pinned replies in adjacent slots, which share a page (slots are
// not page-aligned): detaching both and freeing either first leaves the other's bytes intact.
TEST(PinnedResponseRingTest, AdjacentDetachedSlotsKeepTheirSharedPageUntilBothAreRead) {
  for (bool first_read_first : {true, false}) {
    auto segment = MakeSegment(first_read_first ? "detach2a" : "detach2b");
    PinnedRingKeeper keeper;
    auto ring = std::make_shared<PinnedResponseRing>(segment);
    keeper.Add(ring);
    FakeTimeSource clock;
    zmq::message_t stuck[2];
    for (int k = 0; k < 2; ++k) {
      ASSERT_TRUE(Produce(*segment, static_cast<char>('a' + k)));
      // Whole slot data, so each frame reaches into the page the two slots share.
      stuck[k] = ring->PinFrame(ipc::SlotData(ring->Next()), kDataBytes);
      ring->Finish(clock.Now());
    }
    clock.Advance(Millis(51));
    ASSERT_TRUE(ring->DetachStuck(clock.Now(), Millis(50)));
    ring->ReleaseFreed();
    ASSERT_TRUE(ring->DetachStuck(clock.Now(), Millis(50)));
    ring->ReleaseFreed();
    ASSERT_EQ(ring->unpopped(), 0u);
    zmq::message_t& read_now = stuck[first_read_first ? 0 : 1];
    zmq::message_t& still = stuck[first_read_first ? 1 : 0];
    const char still_fill = first_read_first ? 'b' : 'a';
    read_now = zmq::message_t();
    keeper.ReleaseFreed();
    EXPECT_EQ(ring->detached(), 1u);
    // The worker goes round the ring again, overwriting both slots.
    for (uint32_t i = 0; i < kSlots; ++i) {
      ASSERT_TRUE(Produce(*segment, 'x'));
      ASSERT_NE(ring->Next(), nullptr);
      ring->Finish(clock.Now());
      ring->ReleaseFreed();
    }
    const auto* bytes = static_cast<const uint8_t*>(still.data());
    for (uint64_t i = 0; i < kDataBytes; ++i) {
      ASSERT_EQ(bytes[i], still_fill) << "the unread reply changed at byte " << i
                                      << (first_read_first ? " (first read first)" : "");
    }
    still = zmq::message_t();
    keeper.ReleaseFreed();
    EXPECT_EQ(ring->detached(), 0u);
  }
}

TEST(PinnedResponseRingTest, TheDefaultCapIsAGibibyteOrFourTimesTheLiveSegments) {
  PinnedRingKeeper keeper;
  EXPECT_EQ(keeper.budget().cap_bytes, PinnedRingKeeper::kMinPinnedRetiredBytes);
  auto segment = MakeSegment("cap-default");
  auto ring = std::make_shared<PinnedResponseRing>(segment);
  keeper.Add(ring);
  EXPECT_EQ(keeper.budget().cap_bytes, PinnedRingKeeper::kMinPinnedRetiredBytes);
  EXPECT_TRUE(keeper.budget().Allows(segment->size()));
  EXPECT_EQ(PinnedRingKeeper::DefaultCap(100u << 20), PinnedRingKeeper::kMinPinnedRetiredBytes);
  EXPECT_EQ(PinnedRingKeeper::DefaultCap(uint64_t{2} << 30), uint64_t{8} << 30);
  PinBudget big;
  big.cap_bytes = 4 * (uint64_t{2} << 30);
  big.retired_bytes = big.cap_bytes - 10;
  EXPECT_TRUE(big.Allows(10));
  EXPECT_FALSE(big.Allows(11));
  big.retired_bytes = big.cap_bytes + 1;  // recounted after several workers retired at once
  EXPECT_FALSE(big.Allows(0));
}

// Issue 35: the worker writes the head; the ring checks it before reading a slot.
ipc::SegmentHeader& HeaderOf(const ipc::WorkerSegment& segment) {
  return *reinterpret_cast<ipc::SegmentHeader*>(segment.base());
}

TEST(PinnedResponseRingTest, AHeadFarPastTheTailIsAViolationAndNothingIsRead) {
  auto segment = MakeSegment("head-far");
  PinnedResponseRing ring(segment);
  ASSERT_TRUE(Produce(*segment, 'a'));
  ASSERT_NE(ring.Next(1), nullptr);
  ring.Finish(TimePoint{});
  HeaderOf(*segment).response_head.value.store(1 + (uint64_t{1} << 40));
  EXPECT_EQ(ring.Next(1), nullptr);
  ASSERT_TRUE(ring.violation().has_value());
  EXPECT_EQ(ring.violation()->field, "response_head");
  EXPECT_EQ(ring.violation()->value, std::to_string(1 + (uint64_t{1} << 40)));
  EXPECT_NE(ring.violation()->bound.find("[1, 2]"), std::string::npos) << ring.violation()->bound;
  // Even a head that is fine again is not read: the worker is being killed.
  HeaderOf(*segment).response_head.value.store(1);
  EXPECT_EQ(ring.Next(1), nullptr);
}

TEST(PinnedResponseRingTest, MoreResponsesThanBatchesInFlightOrAHeadGoingBackAreViolations) {
  auto segment = MakeSegment("head-ahead");
  PinnedResponseRing ring(segment);
  ASSERT_TRUE(Produce(*segment, 'a'));
  ASSERT_TRUE(Produce(*segment, 'b'));
  EXPECT_EQ(ring.Next(1), nullptr) << "two responses for one batch";
  EXPECT_EQ(ring.violation()->bound.substr(0, 6), "[0, 1]");

  auto other = MakeSegment("head-back");
  PinnedResponseRing back(other);
  ASSERT_TRUE(Produce(*other, 'a'));
  ASSERT_NE(back.Next(2), nullptr);
  HeaderOf(*other).response_head.value.store(0);
  EXPECT_EQ(back.Next(2), nullptr);
  ASSERT_TRUE(back.violation().has_value());
  EXPECT_EQ(back.violation()->value, "0");
}

TEST(PinnedResponseRingTest, TheTailIsTheRingsOwnAndAScribbledSharedTailIsOverwritten) {
  auto segment = MakeSegment("tail-own");
  PinnedResponseRing ring(segment);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(Produce(*segment, 'a'));
    HeaderOf(*segment).response_tail.value.store(uint64_t{1} << 50);  // the worker scribbles
    ASSERT_NE(ring.Next(1), nullptr) << i;
    ring.Finish(TimePoint{});
    EXPECT_EQ(HeaderOf(*segment).response_tail.value.load(), static_cast<uint64_t>(i + 1));
  }
  EXPECT_FALSE(ring.violation().has_value());
}

}  // namespace
}  // namespace torchfarm
