#include "supervisor/workers/pinned_response_ring.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace torchfarm {

PinnedResponseRing::PinnedResponseRing(std::shared_ptr<ipc::WorkerSegment> segment)
    : segment_(std::move(segment)), ring_(segment_->response_ring()) {
  // The ring view's geometry was fixed when the supervisor created the segment; a worker that
  // scribbles over the segment header later cannot move it.
  live_frames_.resize(ring_.slot_count());
  for (auto& live : live_frames_) live = std::make_unique<std::atomic<uint32_t>>(0);
  answered_at_.resize(ring_.slot_count());
  // old_size 0: a new mapping of the same shared pages (mremap(2)), so a stuck frame's pages can
  // be swapped for a private copy without touching what the supervisor reads through.
  void* alias = ::mremap(segment_->base(), 0, segment_->size(), MREMAP_MAYMOVE);
  if (alias == MAP_FAILED) {
    TF_LOG(kWarn) << "cannot map a worker segment twice; a pinned reply its client does not read "
                     "will cost a worker restart"
                  << Kv("error", std::strerror(errno));
  } else {
    alias_ = static_cast<uint8_t*>(alias);
  }
}

PinnedResponseRing::~PinnedResponseRing() {
  // The keeper destroys a ring only once libzmq freed every message into it.
  if (alias_) ::munmap(alias_, segment_->size());
}

bool PinnedResponseRing::OverlapsDetached(uint64_t offset, uint64_t length) const {
  for (const DetachedRange& range : detached_) {
    if (offset < range.offset + range.length && range.offset < offset + length) return true;
  }
  return false;
}

const uint8_t* PinnedResponseRing::Next(uint64_t awaited) {
  if (violation_) return nullptr;
  const uint64_t head = ring_.LoadHead();
  // Published responses occupy slots [tail_, head): never more than the ring holds, and never
  // more than the batches the worker was given. Written so that no bound overflows.
  const uint64_t ring_room = tail_ + ring_.slot_count() - read_;
  const uint64_t ahead = std::min<uint64_t>(awaited, ring_room);
  violation_ = ipc::CheckIndex("response_head", head, seen_head_, read_ + ahead, [&] {
    return "at least the head seen before, at most the supervisor's tail " + std::to_string(tail_) +
           " plus " + std::to_string(ring_.slot_count()) + " ring slots and at most " +
           std::to_string(read_ - tail_) + " answered plus " +
           (awaited == UINT64_MAX ? std::string("any") : std::to_string(awaited)) +
           " batches in flight";
  });
  if (violation_) return nullptr;
  seen_head_ = head;
  return head == read_ ? nullptr : ring_.SlotAt(read_);
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
  uint8_t* target = const_cast<uint8_t*>(data);  // libzmq never writes through it
  if (alias_) {
    const uint64_t offset = static_cast<uint64_t>(data - segment_->base());
    if (OverlapsDetached(offset, size)) return zmq::message_t(data, size);
    target = alias_ + offset;
  }
  std::atomic<uint32_t>* live = live_frames_[read_ % ring_.slot_count()].get();
  zmq::message_t message(target, size, &ReleaseFrame, live);
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
  for (auto it = detached_.begin(); it != detached_.end();) {
    if (it->permanent || it->live->load(std::memory_order_acquire) != 0 || !Reattach(*it)) {
      ++it;
      continue;
    }
    it = detached_.erase(it);
  }
  uint32_t popped = 0;
  while (tail_ < read_ &&
         live_frames_[tail_ % ring_.slot_count()]->load(std::memory_order_acquire) == 0) {
    ++tail_;
    ++popped;
  }
  // Stored, never read back: the worker may have scribbled over the shared copy.
  if (popped > 0) ring_.StoreTail(tail_);
  return popped;
}

bool PinnedResponseRing::Stuck(TimePoint now, Clock::duration limit) const {
  return tail_ < read_ && now - answered_at_[tail_ % ring_.slot_count()] > limit;
}

bool PinnedResponseRing::DetachStuck(TimePoint now, Clock::duration limit) {
  if (!alias_ || !Stuck(now, limit)) return false;
  const uint8_t* slot = ring_.SlotAt(tail_);  // tail_ < read_: an answered slot
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t slot_offset = static_cast<uint64_t>(slot - segment_->base());
  const uint64_t first = slot_offset / page * page;
  const uint64_t end =
      std::min<uint64_t>((slot_offset + ring_.slot_bytes() + page - 1) / page * page,
                         segment_->size());
  if (end <= first) return false;
  const uint64_t length = end - first;
  // Fill the copy first, then move it over the alias's pages in one step: libzmq may be reading
  // them on its I/O thread right now, and sees the same bytes before and after.
  void* copy = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (copy == MAP_FAILED) return false;
  std::memcpy(copy, alias_ + first, length);
  if (::mremap(copy, length, length, MREMAP_MAYMOVE | MREMAP_FIXED, alias_ + first) ==
      MAP_FAILED) {
    TF_LOG(kWarn) << "cannot move a stuck reply's bytes" << Kv("error", std::strerror(errno));
    ::munmap(copy, length);
    return false;
  }
  const uint32_t position = static_cast<uint32_t>(tail_ % ring_.slot_count());
  DetachedRange range;
  range.offset = first;
  range.length = length;
  range.live = std::move(live_frames_[position]);
  live_frames_[position] = std::make_unique<std::atomic<uint32_t>>(0);
  detached_.push_back(std::move(range));
  return true;
}

bool PinnedResponseRing::Reattach(DetachedRange& range) {
  // The private copy goes; the alias shows the shared pages again, so later frames there pin.
  // Slots are not page-aligned: a boundary page may also belong to another detached range whose
  // message is still unread, and stays private until that range goes too.
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  auto shared_elsewhere = [&](uint64_t at) {
    for (const DetachedRange& other : detached_) {
      if (&other != &range && at >= other.offset && at < other.offset + other.length) return true;
    }
    return false;
  };
  bool ok = true;
  const uint64_t end = range.offset + range.length;
  for (uint64_t run = range.offset; run < end;) {
    if (shared_elsewhere(run)) {
      run += page;
      continue;
    }
    uint64_t run_end = run + page;
    while (run_end < end && !shared_elsewhere(run_end)) run_end += page;
    ok = ok && ::mremap(segment_->base() + run, 0, run_end - run, MREMAP_MAYMOVE | MREMAP_FIXED,
                        alias_ + run) != MAP_FAILED;
    run = run_end;
  }
  if (ok) return true;
  // The copy stays mapped there; frames overlapping it are copied from now on.
  TF_LOG(kWarn) << "cannot map a detached reply's pages back" << Kv("error", std::strerror(errno));
  range.permanent = true;
  return false;
}

size_t PinnedResponseRing::detached() const {
  return static_cast<size_t>(std::count_if(detached_.begin(), detached_.end(),
                                           [](const DetachedRange& r) { return !r.permanent; }));
}

PinnedRingKeeper::PinnedRingKeeper() : budget_(std::make_shared<PinBudget>()) { Recount(); }

void PinnedRingKeeper::Add(std::shared_ptr<PinnedResponseRing> ring) {
  ring->UseBudget(budget_);
  rings_.push_back(std::move(ring));
  Recount();
}

void PinnedRingKeeper::ReleaseFreed() {
  // Runs every loop turn. When every ring is idle and still a worker's (use_count > 1) there is
  // nothing to pop, nothing to forget, and the budget is what the last Recount found: only Add
  // and a ring's retirement change it. A retired ring (use_count 1), idle or not, takes the
  // full path, which forgets it once nothing of it is left.
  bool changed = false;
  for (auto& ring : rings_) {
    if (!ring->idle()) {
      ring->ReleaseFreed();
      changed = true;
    } else if (ring.use_count() == 1) {
      changed = true;
    }
  }
  if (!changed) return;
  // use_count 1: only the keeper holds it (its worker slot moved on to a new segment or is gone).
  rings_.erase(std::remove_if(
                   rings_.begin(), rings_.end(),
                   [](const auto& ring) {
                     return ring.use_count() == 1 && ring->unpopped() == 0 &&
                            ring->detached() == 0;
                   }),
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
                     [](const auto& ring) { return ring->unpopped() > 0 || ring->detached() > 0; });
}

bool PinnedRingKeeper::HasLivePins() const {
  return std::any_of(rings_.begin(), rings_.end(), [](const auto& ring) {
    return ring.use_count() > 1 && ring->unpopped() > 0;
  });
}

}  // namespace torchfarm
