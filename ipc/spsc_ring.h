// A view of one single-producer/single-consumer ring of fixed-size slots inside a worker segment.
//
// Owns nothing: it points into a mapped segment (ipc/worker_segment.h) that must outlive it.
// Exactly one thread of one process calls the producer half (TryReserve/Publish) and exactly one
// the consumer half (Front/Pop). Memory order: see ipc/shm_layout.h.
//
// A side that does not trust the other (the supervisor; ipc/protocol_violation.h) keeps its own
// index in its own memory and only stores it (StoreHead/StoreTail), loads the other side's index
// raw (LoadHead/LoadTail), checks it, and addresses slots by index (SlotAt), which is always
// inside the ring whatever the index.
#pragma once

#include <atomic>
#include <cstdint>

#include "ipc/shm_layout.h"

namespace torchfarm::ipc {

class SpscRing {
 public:
  SpscRing() = default;
  SpscRing(uint8_t* slots, uint32_t slot_count, uint64_t slot_bytes, RingIndex* head,
           RingIndex* tail)
      : slots_(slots), slot_count_(slot_count), slot_bytes_(slot_bytes), head_(&head->value),
        tail_(&tail->value) {}

  // Producer: the slot at head to fill, or nullptr when all slots are in use.
  uint8_t* TryReserve() const {
    uint64_t head = head_->load(std::memory_order_relaxed);
    if (head - tail_->load(std::memory_order_acquire) >= slot_count_) return nullptr;
    return SlotAt(head);
  }
  // Producer: the slot `ahead` places after head (0: TryReserve's), or nullptr when not free yet.
  // Lets a producer with several batches in flight fill slots it will publish in order later.
  uint8_t* TryReserveAhead(uint64_t ahead) const {
    uint64_t head = head_->load(std::memory_order_relaxed) + ahead;
    if (head - tail_->load(std::memory_order_acquire) >= slot_count_) return nullptr;
    return SlotAt(head);
  }
  // Producer: makes the slot returned by TryReserve visible to the consumer.
  void Publish() const { head_->store(head_->load(std::memory_order_relaxed) + 1, std::memory_order_release); }

  // Consumer: the oldest published slot, or nullptr when empty.
  uint8_t* Front() const {
    uint64_t tail = tail_->load(std::memory_order_relaxed);
    if (tail == head_->load(std::memory_order_acquire)) return nullptr;
    return SlotAt(tail);
  }
  // Consumer: the published slot `behind` places after the oldest (0: Front's), or nullptr.
  uint8_t* PeekAt(uint64_t behind) const {
    uint64_t index = tail_->load(std::memory_order_relaxed) + behind;
    if (index >= head_->load(std::memory_order_acquire)) return nullptr;
    return SlotAt(index);
  }
  // Consumer: hands the slot returned by Front back to the producer.
  void Pop() const { tail_->store(tail_->load(std::memory_order_relaxed) + 1, std::memory_order_release); }

  // For a side that keeps its own index (see above).
  uint64_t LoadHead() const { return head_->load(std::memory_order_acquire); }
  uint64_t LoadTail() const { return tail_->load(std::memory_order_acquire); }
  void StoreHead(uint64_t head) const { head_->store(head, std::memory_order_release); }
  void StoreTail(uint64_t tail) const { tail_->store(tail, std::memory_order_release); }
  uint8_t* SlotAt(uint64_t index) const { return slots_ + (index % slot_count_) * slot_bytes_; }

  // Published but not yet popped; exact for the producer and the consumer threads themselves.
  uint64_t Size() const {
    return head_->load(std::memory_order_acquire) - tail_->load(std::memory_order_acquire);
  }
  uint32_t slot_count() const { return slot_count_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t data_capacity() const { return slot_bytes_ - sizeof(SlotHeader); }

 private:
  uint8_t* slots_ = nullptr;
  uint32_t slot_count_ = 0;
  uint64_t slot_bytes_ = 0;
  std::atomic<uint64_t>* head_ = nullptr;
  std::atomic<uint64_t>* tail_ = nullptr;
};

}  // namespace torchfarm::ipc
