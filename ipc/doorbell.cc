#include "ipc/doorbell.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace torchfarm::ipc {

Doorbell::~Doorbell() {
  if (fd_ >= 0) ::close(fd_);
}

Doorbell& Doorbell::operator=(Doorbell&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.Release();
  }
  return *this;
}

Status Doorbell::Create(Doorbell* out) {
  int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return Internal(std::string("eventfd failed: ") + std::strerror(errno));
  *out = Doorbell(fd);
  return Status::Ok();
}

Doorbell Doorbell::Adopt(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  return Doorbell(fd);
}

void Doorbell::Ring() const {
  uint64_t one = 1;
  // EAGAIN means the counter is saturated, which still leaves the fd readable: nothing to do.
  ssize_t ignored = ::write(fd_, &one, sizeof(one));
  (void)ignored;
}

uint64_t Doorbell::Drain() const {
  uint64_t count = 0;
  if (::read(fd_, &count, sizeof(count)) != sizeof(count)) return 0;
  return count;
}

bool Doorbell::Wait(int timeout_ms) const {
  pollfd p{fd_, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, timeout_ms);
  } while (rc < 0 && errno == EINTR);
  return rc > 0 && (p.revents & POLLIN);
}

}  // namespace torchfarm::ipc
