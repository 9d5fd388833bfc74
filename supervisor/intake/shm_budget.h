// The cap on shared memory the supervisor creates: every worker segment and every client_shm
// region takes its size from one budget (config limits.max_shm_bytes; by default the size of
// /dev/shm, past which a page touched in a segment would SIGBUS the process touching it).
// A worker launch that does not fit backs off and retries under the restart policy, like any
// launch failure; an shm_create that does not fit is answered RESOURCE_EXHAUSTED. The gauges
// torchfarm_shm_bytes / torchfarm_shm_limit_bytes and stats "resources.shm_*" show it.
//
// Owns: the running total. A Reservation is the RAII share of one segment or region: it gives
// its bytes back when destroyed. Loop thread only; the budget outlives every reservation.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace torchfarm {

class ShmBudget {
 public:
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept;
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation() { Release(); }

    void Release();
    uint64_t bytes() const { return bytes_; }

   private:
    friend class ShmBudget;
    ShmBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

  explicit ShmBudget(uint64_t limit) : limit_(limit) {}
  ShmBudget(const ShmBudget&) = delete;
  ShmBudget& operator=(const ShmBudget&) = delete;

  // `bytes` for `what` ("worker 3 segment"), or RESOURCE_EXHAUSTED naming what, the bytes, the
  // bytes in use and the limit (and the key that raises it). *out is replaced either way.
  Status Reserve(uint64_t bytes, const std::string& what, Reservation* out);
  // A budget that may be absent (tests, tools): OK with an empty reservation when null.
  static Status Reserve(ShmBudget* budget, uint64_t bytes, const std::string& what,
                        Reservation* out);

  // A reload's new limit: reservations already made stay; new ones must fit.
  void set_limit(uint64_t limit) { limit_ = limit; }
  uint64_t limit() const { return limit_; }
  uint64_t used() const { return used_; }
  uint64_t refused() const { return refused_; }

  // The size of the tmpfs at `dir` (statvfs), or `fallback` when it cannot be read.
  static uint64_t FilesystemBytes(const std::string& dir, uint64_t fallback);

 private:
  uint64_t limit_;
  uint64_t used_ = 0;
  uint64_t refused_ = 0;
};

}  // namespace torchfarm
