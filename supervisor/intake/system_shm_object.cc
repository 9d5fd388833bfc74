#include "supervisor/intake/system_shm_object.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/unique_fd.h"

namespace torchfarm {
namespace {

// The key as an error message quotes it: bounded, so a hostile key cannot swell the message.
std::string KeyShown(const std::string& key) {
  constexpr size_t kMaxShown = 100;
  std::string shown = key.substr(0, kMaxShown);
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  }
  return "'" + shown +
         (key.size() > kMaxShown ? "...' (" + std::to_string(key.size()) + " bytes)" : "'");
}

}  // namespace

Status CheckSystemShmKey(const std::string& key) {
  const std::string expected =
      "expected a shared-memory key of the form \"/name\" (one leading "
      "slash and no other, as shm_open takes it; not a path)";
  if (key.empty()) return InvalidArgument("key: " + expected + ", got an empty key");
  if (key.size() > kMaxSystemShmKeyBytes + 1) {
    return InvalidArgument("key " + KeyShown(key) + ": " + expected + " of at most " +
                           std::to_string(kMaxSystemShmKeyBytes) + " bytes, got " +
                           std::to_string(key.size() - 1));
  }
  const std::string name = key.substr(1);
  if (key[0] != '/' || name.empty() || name.find('/') != std::string::npos || name == "." ||
      name == ".." || key.find('\0') != std::string::npos) {
    return InvalidArgument("key " + KeyShown(key) + ": " + expected);
  }
  return Status::Ok();
}

Status OpenSystemShmObject(const std::string& key, uint64_t offset, uint64_t byte_size, uid_t owner,
                           const std::string& directory, std::unique_ptr<ipc::SharedRegion>* out) {
  if (Status s = CheckSystemShmKey(key); !s.ok()) return s;
  if (byte_size == 0) {
    return InvalidArgument("byte_size: expected at least 1 byte, got 0");
  }
  const std::string path = directory + key;
  // O_NOFOLLOW: a symbolic link in the shm directory could point anywhere the supervisor can
  // write; O_NONBLOCK: a FIFO planted there must not stall the loop.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    const int error = errno;
    if (error == ENOENT) {
      return NotFound("key " + KeyShown(key) + ": no shared-memory object of that name (" + path +
                      "); create it with shm_open before registering it");
    }
    if (error == ELOOP) {
      return InvalidArgument("key " + KeyShown(key) + ": " + path +
                             " is a symbolic link; expected a shared-memory object (a regular "
                             "file in " +
                             directory + ")");
    }
    return InvalidArgument("key " + KeyShown(key) + ": cannot open " + path + ": " +
                           std::strerror(error));
  }
  struct stat checked {};
  if (::fstat(fd.get(), &checked) != 0) {
    return Internal("key " + KeyShown(key) + ": cannot fstat " + path + ": " +
                    std::strerror(errno));
  }
  if (!S_ISREG(checked.st_mode)) {
    return InvalidArgument("key " + KeyShown(key) + ": " + path +
                           " is not a regular file; expected a shared-memory object");
  }
  if (checked.st_uid != owner) {
    return InvalidArgument("key " + KeyShown(key) + ": the object is owned by uid " +
                           std::to_string(checked.st_uid) + "; the supervisor runs as uid " +
                           std::to_string(owner) + " and maps only its own user's objects");
  }
  const auto size = static_cast<uint64_t>(checked.st_size);
  if (offset > size || byte_size > size - offset) {
    return InvalidArgument("key " + KeyShown(key) + ": offset " + std::to_string(offset) +
                           " + byte_size " + std::to_string(byte_size) + " = " +
                           std::to_string(offset + byte_size) +
                           " runs past the end of the object (" + std::to_string(size) + " bytes)");
  }
  struct stat mapped {};
  std::unique_ptr<ipc::SharedRegion> region;
  if (Status s = ipc::SharedRegion::OpenRange(key, offset, byte_size, &mapped, &region); !s.ok()) {
    return Status(s.code(), "key " + KeyShown(key) + ": " + s.message());
  }
  if (mapped.st_dev != checked.st_dev || mapped.st_ino != checked.st_ino) {
    return InvalidArgument("key " + KeyShown(key) +
                           ": the object was replaced while it was being "
                           "registered; register it again");
  }
  *out = std::move(region);
  return Status::Ok();
}

}  // namespace torchfarm
