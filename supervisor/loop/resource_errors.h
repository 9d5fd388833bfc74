// Failures for want of a resource (descriptors, processes, memory, /dev/shm) in the supervisor's
// loop: each one fails only the operation it hit (one admin answer, one worker launch, one client
// region), is counted by operation, and is logged, at most once per kLogInterval per operation
// with the number of repeats left unlogged in between. Stats ("resources.errors") and the metric
// torchfarm_resource_errors_total{operation} show the counts.
//
// Owns: the counts. Loop thread only (the process's one instance, so deep callees such as a
// worker launch can count without plumbing).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/clock.h"

namespace torchfarm {

// EMFILE, ENFILE, ENOMEM, EAGAIN, ENOBUFS, ENOSPC: the machine's state, not a bug or bad input.
bool IsResourceErrno(int error);

class ResourceErrors {
 public:
  static constexpr Millis kLogInterval{10'000};

  static ResourceErrors& Instance();

  // `operation` ("admin", "worker launch", "client shm create", ...) failed with `error`.
  void Note(const std::string& operation, const std::string& error, TimePoint now);

  const std::map<std::string, uint64_t>& counts() const { return counts_; }
  uint64_t total() const;

 private:
  struct LogState {
    TimePoint last_logged{};
    uint64_t unlogged = 0;
    bool logged_once = false;
  };
  std::map<std::string, uint64_t> counts_;
  std::map<std::string, LogState> logs_;
};

}  // namespace torchfarm
