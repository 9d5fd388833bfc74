// SpscRing: single-process behaviour (empty, full, wrap-around) and a real two-process run where a
// forked producer and the parent consumer move 100k slots through a shared segment, with
// doorbells, checking order and checksums.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "ipc/doorbell.h"
#include "ipc/worker_segment.h"

namespace torchfarm::ipc {
namespace {

std::string UniqueName(const char* tag) {
  return "torchfarm-test-" + std::to_string(::getpid()) + "-" + tag;
}

TEST(SpscRing, EmptyThenFullThenWrapsAround) {
  std::unique_ptr<WorkerSegment> segment;
  ASSERT_TRUE(WorkerSegment::Create(UniqueName("wrap"), 4, 1024, &segment).ok());
  SpscRing ring = segment->request_ring();
  EXPECT_EQ(ring.Front(), nullptr);
  EXPECT_EQ(ring.Size(), 0u);

  // Ten laps around a 4-slot ring: each slot is reused and keeps its position modulo 4.
  uint64_t produced = 0, consumed = 0;
  for (int lap = 0; lap < 10; ++lap) {
    for (int i = 0; i < 4; ++i) {
      uint8_t* slot = ring.TryReserve();
      ASSERT_NE(slot, nullptr) << "lap " << lap << " slot " << i;
      SlotHeaderOf(slot)->batch_id = produced++;
      ring.Publish();
    }
    EXPECT_EQ(ring.TryReserve(), nullptr) << "a full ring must refuse a fifth slot";
    EXPECT_EQ(ring.Size(), 4u);
    for (int i = 0; i < 4; ++i) {
      uint8_t* slot = ring.Front();
      ASSERT_NE(slot, nullptr);
      EXPECT_EQ(SlotHeaderOf(slot)->batch_id, consumed++);
      ring.Pop();
    }
    EXPECT_EQ(ring.Front(), nullptr);
  }
  EXPECT_EQ(consumed, 40u);
}

// A producer with several batches in flight (a GPU worker with K streams) fills slots ahead of
// head and publishes them in order; the consumer peeks past its oldest slot.
TEST(SpscRing, ReserveAheadAndPeekAtFollowRingOrder) {
  std::unique_ptr<WorkerSegment> segment;
  ASSERT_TRUE(WorkerSegment::Create(UniqueName("ahead"), 4, 1024, &segment).ok());
  SpscRing ring = segment->request_ring();
  for (uint64_t k = 0; k < 4; ++k) {
    uint8_t* slot = ring.TryReserveAhead(k);
    ASSERT_NE(slot, nullptr) << k;
    SlotHeaderOf(slot)->batch_id = 100 + k;
  }
  EXPECT_EQ(ring.TryReserveAhead(4), nullptr) << "only 4 slots exist";
  EXPECT_EQ(ring.TryReserveAhead(0), ring.TryReserve());
  EXPECT_EQ(ring.PeekAt(0), nullptr) << "nothing published yet";
  ring.Publish();
  ring.Publish();
  EXPECT_EQ(SlotHeaderOf(ring.PeekAt(0))->batch_id, 100u);
  EXPECT_EQ(SlotHeaderOf(ring.PeekAt(1))->batch_id, 101u);
  EXPECT_EQ(ring.PeekAt(2), nullptr) << "reserved but unpublished slots stay invisible";
  EXPECT_EQ(ring.TryReserveAhead(2), nullptr) << "2 published + 2 ahead fill the ring";
  ring.Pop();
  EXPECT_EQ(SlotHeaderOf(ring.PeekAt(0))->batch_id, 101u);
  EXPECT_EQ(ring.PeekAt(0), ring.Front());
  // Wrap-around: the slot after the last is the first one again.
  EXPECT_EQ(ring.TryReserveAhead(2), ring.PeekAt(0) - ring.slot_bytes());
}

TEST(SpscRing, SlotsAreDistinctAndAligned) {
  std::unique_ptr<WorkerSegment> segment;
  ASSERT_TRUE(WorkerSegment::Create(UniqueName("align"), 3, 1000, &segment).ok());
  SpscRing ring = segment->request_ring();
  EXPECT_GE(ring.data_capacity(), 1000u);
  uint8_t* previous = nullptr;
  for (int i = 0; i < 3; ++i) {
    uint8_t* slot = ring.TryReserve();
    ASSERT_NE(slot, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(SlotData(slot)) % kTensorAlignment, 0u);
    if (previous) {
      EXPECT_EQ(slot - previous, static_cast<ptrdiff_t>(ring.slot_bytes()));
    }
    previous = slot;
    ring.Publish();
  }
}

uint64_t Checksum(const uint8_t* data, size_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < n; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

TEST(SpscRing, TwoProcessesMove100kSlotsWithChecksums) {
  constexpr uint64_t kCount = 100'000;
  constexpr size_t kPayload = 256;
  std::unique_ptr<WorkerSegment> segment;
  ASSERT_TRUE(WorkerSegment::Create(UniqueName("fork"), 8, 4096, &segment).ok());
  Doorbell produced_bell, consumed_bell;
  ASSERT_TRUE(Doorbell::Create(&produced_bell).ok());
  ASSERT_TRUE(Doorbell::Create(&consumed_bell).ok());

  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Producer: opens the segment by name, as a worker would after exec.
    std::unique_ptr<WorkerSegment> mine;
    if (!WorkerSegment::Open(segment->name(), &mine).ok()) ::_exit(10);
    SpscRing ring = mine->request_ring();
    for (uint64_t i = 0; i < kCount; ++i) {
      uint8_t* slot;
      while ((slot = ring.TryReserve()) == nullptr) consumed_bell.Wait(100), consumed_bell.Drain();
      SlotHeader* header = SlotHeaderOf(slot);
      uint8_t* data = SlotData(slot);
      for (size_t b = 0; b < kPayload; ++b) data[b] = static_cast<uint8_t>((i * 131 + b * 7) & 0xff);
      header->batch_id = i;
      header->compute_us = Checksum(data, kPayload);
      ring.Publish();
      produced_bell.Ring();
    }
    ::_exit(0);
  }

  SpscRing ring = segment->request_ring();
  uint64_t received = 0, bad = 0;
  while (received < kCount) {
    const uint8_t* slot = ring.Front();
    if (!slot) {
      if (!produced_bell.Wait(5000)) break;
      produced_bell.Drain();
      continue;
    }
    const SlotHeader* header = SlotHeaderOf(slot);
    if (header->batch_id != received || header->compute_us != Checksum(SlotData(slot), kPayload)) ++bad;
    ++received;
    ring.Pop();
    consumed_bell.Ring();
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "producer status " << status;
  EXPECT_EQ(received, kCount);
  EXPECT_EQ(bad, 0u) << "slots arrived out of order or corrupted";
}

}  // namespace
}  // namespace torchfarm::ipc
