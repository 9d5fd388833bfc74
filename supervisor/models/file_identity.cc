#include "supervisor/models/file_identity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/unique_fd.h"

namespace torchfarm {

namespace {

constexpr uint64_t kMultiplier = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio, odd
constexpr size_t kReadChunk = 1 << 20;

// A 64-bit finaliser (xor-shift-multiply): every input bit reaches every output bit.
uint64_t Mix(uint64_t h) {
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 27;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 31;
  return h;
}

}  // namespace

uint64_t ContentHash(const void* data, size_t size, uint64_t seed) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  // Four independent lanes of 8 bytes each keep the multiplier pipeline busy (several GB/s).
  uint64_t lane[4] = {seed ^ 1, seed ^ 2, seed ^ 3, seed ^ 4};
  size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t word;
      std::memcpy(&word, bytes + i + 8 * k, 8);
      lane[k] = (lane[k] ^ word) * kMultiplier;
      lane[k] ^= lane[k] >> 29;
    }
  }
  uint64_t h = Mix(lane[0]) ^ Mix(lane[1] + 1) ^ Mix(lane[2] + 2) ^ Mix(lane[3] + 3);
  for (; i < size; ++i) h = (h ^ bytes[i]) * kMultiplier;
  return Mix(h ^ size);
}

std::string FileIdentity::Describe() const {
  if (!error.empty()) return error;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  return "size " + std::to_string(size) + ", hash " + hex;
}

bool FileIdentity::StatUnchanged(const struct stat& st) const {
  const int64_t mtime =
      static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  const int64_t ctime =
      static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  return error.empty() && st.st_size == size && mtime == mtime_ns && ctime == ctime_ns &&
         static_cast<uint64_t>(st.st_dev) == device && static_cast<uint64_t>(st.st_ino) == inode;
}

FileIdentity ReadFileIdentity(const std::string& path) {
  FileIdentity id;
  id.path = path;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    id.error = "cannot read " + path + ": " + std::strerror(errno);
    return id;
  }
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  id.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  id.device = static_cast<uint64_t>(st.st_dev);
  id.inode = static_cast<uint64_t>(st.st_ino);
  std::vector<unsigned char> buffer(kReadChunk);
  uint64_t hash = 0;
  int64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      id.error = "cannot read " + path + ": " + std::strerror(errno);
      return id;
    }
    if (n == 0) break;
    hash = ContentHash(buffer.data(), static_cast<size_t>(n), hash);
    total += n;
  }
  id.size = total;
  id.hash = hash;
  return id;
}

}  // namespace torchfarm
