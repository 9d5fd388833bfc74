#include "common/random_hex.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace torchfarm {

Status RandomHex(size_t bytes, std::string* out) {
  std::string raw(bytes, '\0');
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Internal(std::string("cannot open /dev/urandom: ") + std::strerror(errno));
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::read(fd, raw.data() + got, bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got < bytes) return Internal("short read from /dev/urandom");
  static const char kDigits[] = "0123456789abcdef";
  out->clear();
  for (unsigned char c : raw) {
    out->push_back(kDigits[c >> 4]);
    out->push_back(kDigits[c & 15]);
  }
  return Status::Ok();
}

}  // namespace torchfarm
