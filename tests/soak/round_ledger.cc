#include "round_ledger.h"

#include <cstdio>
#include <sstream>

namespace torchfarm::testing {

void RoundLedger::Fail(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++failure_count_;
  if (failures_.size() < kKeptFailures) failures_.push_back("t=" + Stamp() + " " + what);
}

void RoundLedger::Note(const std::string& event) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back("t=" + Stamp() + " " + event);
}

void RoundLedger::CountError(const std::string& code, const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++errors_[code];
  if (error_samples_.size() < kKeptErrorSamples) {
    error_samples_.push_back("t=" + Stamp() + " " + code + ": " + message);
  }
}

int64_t RoundLedger::failure_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_count_;
}

int64_t RoundLedger::error_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t n = 0;
  for (const auto& [code, count] : errors_) n += count;
  return n;
}

std::string RoundLedger::Stamp() const {
  auto elapsed = std::chrono::steady_clock::now() - start_;
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f",
                std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() / 1000.0);
  return text;
}

std::string RoundLedger::Summary() const {
  std::ostringstream out;
  out << "sent=" << sent << " ok=" << ok << " deadline_exceeded=" << deadline_exceeded;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [code, count] : errors_) out << " " << code << "=" << count;
  out << " broken_invariants=" << failure_count_;
  return out.str();
}

std::string RoundLedger::Report() const {
  std::string summary = Summary();
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  out << "  counts: " << summary << "\n";
  out << "  broken invariants (" << failure_count_ << ", first " << failures_.size() << "):\n";
  for (const auto& f : failures_) out << "    " << f << "\n";
  if (!error_samples_.empty()) {
    out << "  error replies (first " << error_samples_.size() << "):\n";
    for (const auto& e : error_samples_) out << "    " << e << "\n";
  }
  out << "  faults:\n";
  for (const auto& e : events_) out << "    " << e << "\n";
  return out.str();
}

}  // namespace torchfarm::testing
