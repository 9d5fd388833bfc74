#include "supervisor/loop/resource_errors.h"

#include <cerrno>

#include "common/log.h"

namespace torchfarm {

bool IsResourceErrno(int error) {
  return error == EMFILE || error == ENFILE || error == ENOMEM || error == EAGAIN ||
         error == ENOBUFS || error == ENOSPC;
}

ResourceErrors& ResourceErrors::Instance() {
  static ResourceErrors errors;
  return errors;
}

void ResourceErrors::Note(const std::string& operation, const std::string& error, TimePoint now) {
  ++counts_[operation];
  LogState& log = logs_[operation];
  // A machine out of descriptors fails the same call thousands of times a second: one line per
  // interval says so without flooding the journal.
  if (log.logged_once && now - log.last_logged < kLogInterval) {
    ++log.unlogged;
    return;
  }
  TF_LOG(kWarn) << "operation failed for want of resources; the supervisor carries on"
                << Kv("operation", operation) << Kv("error", error)
                << Kv("repeats_unlogged", log.unlogged) << Kv("total", counts_[operation]);
  log.logged_once = true;
  log.last_logged = now;
  log.unlogged = 0;
}

uint64_t ResourceErrors::total() const {
  uint64_t sum = 0;
  for (const auto& [operation, n] : counts_) sum += n;
  return sum;
}

}  // namespace torchfarm
