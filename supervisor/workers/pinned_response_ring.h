// The supervisor's consumer side of one worker's response ring, with zero-copy reply frames.
//
// A reply frame of a large output can be a zmq message pointing straight into the response slot
// (zmq_msg_init_data with a free callback) instead of a copy. Such a slot must not go back to the
// worker (the ring's Pop) until libzmq has freed every message that points into it. This class
// reads responses at its own cursor, ahead of the ring's tail, counts the live messages of each
// slot in an atomic, and pops the tail strictly in order as the oldest slots' counts reach zero.
//
//   tail (popped up to here)   read_ (next response to read)        head (worker's)
//     |  answered, pinned or waiting  |  published, not read yet          |
//
// A slot behind a pinned one cannot be popped either (the ring is in-order), so `unpopped()` is
// what the worker has lost: WorkerSlot keeps in-flight batches + unpopped <= ring slots so the
// worker never waits for a response slot, and pins only while max_inflight_per_worker slots stay
// free.
//
// Detaching a stuck slot (a client that stopped reading with a pinned reply in its pipe): frames
// point into a second mapping of the segment (`alias_`, mremap of the same shared pages), never
// into the mapping the supervisor reads responses through. DetachStuck copies the tail slot's
// pages into private memory and moves that copy over the alias's pages in one mremap, so libzmq
// reads the same bytes from then on while the shared slot goes back to the worker. Once the
// stuck message is freed the alias's pages are mapped onto the shared pages again. A frame whose
// pages are detached is copied, not pinned.
//
// The worker writes the ring's head and the slots; the supervisor trusts neither
// (ipc/protocol_violation.h). The ring's tail lives in tail_, never read back from the segment;
// Next checks the head against [the last head seen, min(tail_ + slot count, read_ + awaited)]
// before touching a slot, and on a violation records it, reads nothing more from this segment and
// answers nullptr from then on: the caller kills the worker.
//
// Owns: a shared reference to the segment, so the mapping outlives a worker restart until the
// last message into it is freed, and the per-slot counts. Threads: the supervisor's loop thread
// calls everything; libzmq's I/O threads run ReleaseFrame (one atomic decrement, nothing else).
// The object must outlive every message it made: PinnedRingKeeper holds it, and the Supervisor
// declares the keeper before its zmq context, so the keeper is destroyed after the context has
// freed the last message.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <zmq.hpp>

#include "common/clock.h"
#include "ipc/protocol_violation.h"
#include "ipc/spsc_ring.h"
#include "ipc/worker_segment.h"

namespace torchfarm {

// How much memory zero-copy replies may keep mapped after their worker moved on. A client that
// stops reading pins its replies' segment until it reads or disconnects, and each time that
// stalls a worker the worker is replaced on a fresh segment: without a cap, such a client pins
// segment after segment. libzmq still reads a pinned segment, so it can never be unmapped early;
// instead, while the retired segments (no worker slot uses them; only pinned replies keep them
// mapped) would pass the cap if one more segment joined them, rings copy their replies rather
// than pin them. Copied replies free their slot at once, so nothing more gets stuck or retired.
// Loop thread only: the keeper writes it, its rings read it.
struct PinBudget {
  uint64_t retired_bytes = 0;
  uint64_t cap_bytes = UINT64_MAX;
  uint64_t copied_frames = 0;  // frames copied because the cap was reached
  bool refusing = false;       // the last frame was refused (logged once per episode)

  bool Allows(uint64_t segment_bytes) const {
    return retired_bytes <= cap_bytes && segment_bytes <= cap_bytes - retired_bytes;
  }
};

class PinnedResponseRing {
 public:
  explicit PinnedResponseRing(std::shared_ptr<ipc::WorkerSegment> segment);
  PinnedResponseRing(const PinnedResponseRing&) = delete;
  PinnedResponseRing& operator=(const PinnedResponseRing&) = delete;

  // The oldest published response not read yet, or nullptr: none, or the worker's head broke
  // the layout (violation() then says how). `awaited`: the batches the worker holds that have no
  // response yet; a head further ahead than that is a violation too.
  const uint8_t* Next(uint64_t awaited = UINT64_MAX);
  // Set once the worker's head broke the layout; the ring is not read again.
  const std::optional<ipc::ProtocolViolation>& violation() const { return violation_; }
  // A zmq message of `size` bytes at `data`, inside the response returned by Next(); the slot
  // stays unpopped until libzmq has freed the message. A copy instead while the keeper's
  // PinBudget does not allow pinning this ring's segment.
  zmq::message_t PinFrame(const uint8_t* data, size_t size);
  // The response returned by Next() is answered: moves the read cursor on and pops whatever can
  // be popped. `now` dates the slot for Stuck().
  void Finish(TimePoint now);
  // Pops every leading answered slot whose messages are all freed. Returns how many.
  uint32_t ReleaseFreed();
  // True when the oldest unpopped slot has waited longer than `limit` for its messages.
  bool Stuck(TimePoint now, Clock::duration limit) const;
  // When Stuck: moves the tail slot's pinned bytes to private memory under its messages and
  // makes the slot poppable. False when not stuck or the mappings cannot be changed (the caller
  // falls back to replacing the worker).
  bool DetachStuck(TimePoint now, Clock::duration limit);
  // Detached ranges whose messages libzmq still holds.
  size_t detached() const;

  // Answered but not popped: pinned slots and the slots queued behind them.
  uint32_t unpopped() const { return static_cast<uint32_t>(read_ - tail_); }
  // Nothing to pop and nothing detached that could be mapped back: ReleaseFreed would do nothing.
  bool idle() const {
    return tail_ == read_ && std::all_of(detached_.begin(), detached_.end(),
                                         [](const DetachedRange& r) { return r.permanent; });
  }
  uint32_t slot_count() const { return ring_.slot_count(); }
  const ipc::WorkerSegment& segment() const { return *segment_; }
  // Set by PinnedRingKeeper::Add; without one, every frame may be pinned.
  void UseBudget(std::shared_ptr<PinBudget> budget) { budget_ = std::move(budget); }

 ~PinnedResponseRing();

 private:
  struct DetachedRange {
    uint64_t offset = 0;  // page-aligned, from the segment's base
    uint64_t length = 0;
    std::unique_ptr<std::atomic<uint32_t>> live;  // the stuck slot's message count
    bool permanent = false;  // could not be mapped back: its frames are copied for good
  };
  static void ReleaseFrame(void* data, void* hint);
  // Maps the alias's pages of `range` back onto the shared pages once its messages are freed.
  bool Reattach(DetachedRange& range);
  bool OverlapsDetached(uint64_t offset, uint64_t length) const;

  std::shared_ptr<ipc::WorkerSegment> segment_;
  uint8_t* alias_ = nullptr;  // the second mapping frames point into; null: pin into the segment
  std::shared_ptr<PinBudget> budget_;
  ipc::SpscRing ring_;
  uint64_t tail_ = 0;  // the ring's tail; this object is its only writer
  uint64_t read_ = 0;
  uint64_t seen_head_ = 0;  // the worker's head as last checked; heads never go back
  std::optional<ipc::ProtocolViolation> violation_;
  // Per slot position; a detached slot's counter moves to its DetachedRange.
  std::vector<std::unique_ptr<std::atomic<uint32_t>>> live_frames_;
  std::vector<DetachedRange> detached_;
  std::vector<TimePoint> answered_at_;                   // per slot position
};

// Every PinnedResponseRing that may still have messages in libzmq: the current ring of each
// worker slot and the rings of workers that exited while clients were still receiving from them.
// Owns the PinBudget of its rings: the cap on retired segments is the larger of
// kMinPinnedRetiredBytes and kPinnedRetiredPerLive times the bytes of the live segments (those a
// worker slot still uses), unless set_cap_bytes fixed it. Loop thread only.
class PinnedRingKeeper {
 public:
  static constexpr uint64_t kMinPinnedRetiredBytes = uint64_t{1} << 30;  // 1 GiB
  static constexpr uint64_t kPinnedRetiredPerLive = 4;

  // The cap on retired segments when the live ones take `live_bytes`.
  static uint64_t DefaultCap(uint64_t live_bytes) {
    return std::max(kMinPinnedRetiredBytes, kPinnedRetiredPerLive * live_bytes);
  }

  PinnedRingKeeper();
  void Add(std::shared_ptr<PinnedResponseRing> ring);
  // Pops freed slots on every ring, forgets rings no slot uses and no message references, and
  // recounts the budget.
  void ReleaseFreed();
  // True while some ring has unpopped slots (the loop then polls with a short timeout).
  bool HasPins() const;
  // The same for the rings a worker still uses (a slot shares them with the keeper): their pins
  // hold back that worker. A retired ring's pins only hold memory, freed at the loop's slower
  // pace.
  bool HasLivePins() const;
  size_t size() const { return rings_.size(); }
  // 0: the default cap above.
  void set_cap_bytes(uint64_t cap) {
    fixed_cap_ = cap;
    Recount();
  }
  const PinBudget& budget() const { return *budget_; }

 private:
  void Recount();

  std::vector<std::shared_ptr<PinnedResponseRing>> rings_;
  std::shared_ptr<PinBudget> budget_;
  uint64_t fixed_cap_ = 0;
};

}  // namespace torchfarm
