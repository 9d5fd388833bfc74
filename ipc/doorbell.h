// A pollable wake-up between two processes: an eventfd. The producer of a ring rings it after
// publishing; the consumer polls its fd, drains it, then empties the ring. Because the counter
// stays readable until drained, a ring that happens between the consumer's last look at the ring
// and its next poll is never lost.
//
// Owns: the fd (closed on destruction). The supervisor creates both doorbells of a worker and the
// worker inherits them across exec at the fd numbers passed on its command line.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace torchfarm::ipc {

class Doorbell {
 public:
  Doorbell() = default;
  ~Doorbell();
  Doorbell(Doorbell&& other) noexcept : fd_(other.Release()) {}
  Doorbell& operator=(Doorbell&& other) noexcept;
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  // A new non-blocking, close-on-exec eventfd.
  static Status Create(Doorbell* out);
  // Takes ownership of an inherited fd (made non-blocking and close-on-exec here).
  static Doorbell Adopt(int fd);

  void Ring() const;
  // Resets the counter; returns how many rings it held (0 if none).
  uint64_t Drain() const;
  // Blocks up to timeout_ms (-1 forever) until rung; true if rung. Does not drain.
  bool Wait(int timeout_ms) const;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  explicit Doorbell(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace torchfarm::ipc
