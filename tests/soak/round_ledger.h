// What one soak round saw: request and reply counts, error replies by code, broken invariants and
// a timeline of the faults. Filled from every client thread, the fault thread and the main thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace torchfarm::testing {

class RoundLedger {
 public:
  RoundLedger() : start_(std::chrono::steady_clock::now()) {}

  // A broken invariant. The first kKeptFailures are kept word for word, the rest counted.
  void Fail(const std::string& what);
  // A fault or other event, stamped with the seconds since the round began.
  void Note(const std::string& event);
  // An error reply the farm may give under faults (UNAVAILABLE, INTERNAL, RESOURCE_EXHAUSTED);
  // the round checks at its end that they stay a small fraction.
  void CountError(const std::string& code, const std::string& message);

  int64_t failure_count() const;
  int64_t error_count() const;
  // "seconds since start" as text, e.g. "3.25".
  std::string Stamp() const;
  // Broken invariants, error counts with samples, and the fault timeline.
  std::string Report() const;
  // One line: sent, ok, deadline_exceeded, errors by code.
  std::string Summary() const;

  std::atomic<int64_t> sent{0};
  std::atomic<int64_t> ok{0};
  std::atomic<int64_t> deadline_exceeded{0};  // of requests that carried a deadline

 private:
  static constexpr size_t kKeptFailures = 20;
  static constexpr size_t kKeptErrorSamples = 5;

  const std::chrono::steady_clock::time_point start_;
  mutable std::mutex mutex_;
  int64_t failure_count_ = 0;
  std::vector<std::string> failures_;
  std::map<std::string, int64_t> errors_;
  std::vector<std::string> error_samples_;
  std::vector<std::string> events_;
};

}  // namespace torchfarm::testing
