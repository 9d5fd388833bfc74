#include "supervisor/intake/shm_budget.h"

#include <sys/statvfs.h>

namespace torchfarm {

ShmBudget::Reservation& ShmBudget::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = other.budget_;
    bytes_ = other.bytes_;
    other.budget_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void ShmBudget::Reservation::Release() {
  if (budget_) budget_->used_ -= bytes_;
  budget_ = nullptr;
  bytes_ = 0;
}

Status ShmBudget::Reserve(uint64_t bytes, const std::string& what, Reservation* out) {
  out->Release();
  // Written as a subtraction: used_ + bytes could wrap for a request near 2^64.
  if (bytes > limit_ || used_ > limit_ - bytes) {
    ++refused_;
    return ResourceExhausted(what + ": " + std::to_string(bytes) +
                             " bytes of shared memory do not fit: " + std::to_string(used_) +
                             " of " + std::to_string(limit_) +
                             " bytes are in use (limits.max_shm_bytes)");
  }
  used_ += bytes;
  out->budget_ = this;
  out->bytes_ = bytes;
  return Status::Ok();
}

Status ShmBudget::Reserve(ShmBudget* budget, uint64_t bytes, const std::string& what,
                          Reservation* out) {
  if (budget) return budget->Reserve(bytes, what, out);
  out->Release();
  return Status::Ok();
}

uint64_t ShmBudget::FilesystemBytes(const std::string& dir, uint64_t fallback) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0 || fs.f_blocks == 0) return fallback;
  return static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
}

}  // namespace torchfarm
