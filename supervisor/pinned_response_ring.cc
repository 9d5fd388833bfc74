#include "supervisor/pinned_response_ring.h"

#include <algorithm>

#include "common/log.h"

namespace torchfarm {

PinnedResponseRing::PinnedResponseRing(std::shared_ptr<ipc::WorkerSegment> segment)
    : segment_(std::move(segment)), ring_(segment_->response_ring()) {
  // The ring view's geometry was fixed when the supervisor created the segment; a worker that
  // scribbles over the segment header later cannot move it.
  live_frames_ = std::make_unique<std::atomic<uint32_t>[]>(ring_.slot_count());
  for (uint32_t i = 0; i < ring_.slot_count(); ++i) live_frames_[i].store(0);
  answered_at_.resize(ring_.slot_count());
}

const uint8_t* PinnedResponseRing::Next() const {
  // The ring's tail is tail_ (this object is its only consumer): read_ is read_ - tail_ behind it.
  return ring_.PeekAt(read_ - tail_);
}

void PinnedResponseRing::ReleaseFrame(void* /*data*/, void* hint) {
  // libzmq's I/O thread, once the bytes are on the wire (or the message was dropped): release
  // order so that its reads of the slot happen before the loop thread pops it.
  static_cast<std::atomic<uint32_t>*>(hint)->fetch_sub(1, std::memory_order_release);
}

zmq::message_t PinnedResponseRing::PinFrame(const uint8_t* data, size_t size) {
  if (budget_ && !budget_->Allows(segment_->size())) {
    if (!budget_->refusing) {
      TF_LOG(kWarn) << "zero-copy replies that clients do not read keep retired worker segments "
                       "mapped up to the cap; copying replies until they are read"
                    << Kv("retired_bytes", budget_->retired_bytes)
                    << Kv("cap_bytes", budget_->cap_bytes);
    }
    budget_->refusing = true;
    ++budget_->copied_frames;
    return zmq::message_t(data, size);
  }
  if (budget_) budget_->refusing = false;
  std::atomic<uint32_t>* live = &live_frames_[read_ % ring_.slot_count()];
  // libzmq never writes through the pointer of a message it sends.
  zmq::message_t message(const_cast<uint8_t*>(data), size, &ReleaseFrame, live);
  // Counted once the message exists: a constructor that throws never calls ReleaseFrame.
  live->fetch_add(1, std::memory_order_relaxed);
  return message;
}

void PinnedResponseRing::Finish(TimePoint now) {
  answered_at_[read_ % ring_.slot_count()] = now;
  ++read_;
  ReleaseFreed();
}

uint32_t PinnedResponseRing::ReleaseFreed() {
  uint32_t popped = 0;
  while (tail_ < read_ &&
         live_frames_[tail_ % ring_.slot_count()].load(std::memory_order_acquire) == 0) {
    ring_.Pop();
    ++tail_;
    ++popped;
  }
  return popped;
}

bool PinnedResponseRing::Stuck(TimePoint now, Clock::duration limit) const {
  return tail_ < read_ && now - answered_at_[tail_ % ring_.slot_count()] > limit;
}

PinnedRingKeeper::PinnedRingKeeper() : budget_(std::make_shared<PinBudget>()) { Recount(); }

void PinnedRingKeeper::Add(std::shared_ptr<PinnedResponseRing> ring) {
  ring->UseBudget(budget_);
  rings_.push_back(std::move(ring));
  Recount();
}

void PinnedRingKeeper::ReleaseFreed() {
  for (auto& ring : rings_) ring->ReleaseFreed();
  // use_count 1: only the keeper holds it (its worker slot moved on to a new segment or is gone).
  rings_.erase(std::remove_if(
                   rings_.begin(), rings_.end(),
                   [](const auto& ring) { return ring.use_count() == 1 && ring->unpopped() == 0; }),
               rings_.end());
  Recount();
}

void PinnedRingKeeper::Recount() {
  uint64_t live = 0, retired = 0;
  for (const auto& ring : rings_) {
    (ring.use_count() == 1 ? retired : live) += ring->segment().size();
  }
  budget_->retired_bytes = retired;
  budget_->cap_bytes = fixed_cap_ != 0 ? fixed_cap_ : DefaultCap(live);
}

bool PinnedRingKeeper::HasPins() const {
  return std::any_of(rings_.begin(), rings_.end(),
                     [](const auto& ring) { return ring->unpopped() > 0; });
}

bool PinnedRingKeeper::HasLivePins() const {
  return std::any_of(rings_.begin(), rings_.end(), [](const auto& ring) {
    return ring.use_count() > 1 && ring->unpopped() > 0;
  });
}

}  // namespace torchfarm
