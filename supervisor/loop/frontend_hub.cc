// FrontendHub: see frontend_hub.h.
#include "supervisor/loop/frontend_hub.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace torchfarm {

MailboxSignal::MailboxSignal() {
  fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
}

MailboxSignal::~MailboxSignal() {
  if (fd_ >= 0) ::close(fd_);
}

// Both under the mailbox's lock: the descriptor's level follows its emptiness exactly. A failed
// write cannot be EAGAIN (the counter is at most 1); the others mean a closed descriptor, a bug.
void MailboxSignal::Raise() {
  const uint64_t one = 1;
  while (::write(fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void MailboxSignal::Lower() {
  uint64_t count = 0;
  while (::read(fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
}

zmq::message_t FrontendHub::Attach(FrontendMailbox* replies) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint32_t id = next_channel_++;
  channels_[id] = replies;
  return zmq::message_t(&id, sizeof(id));
}

namespace {

bool ChannelId(const zmq::message_t& identity, uint32_t* id) {
  if (identity.size() != sizeof(*id)) return false;
  std::memcpy(id, identity.data(), sizeof(*id));
  return true;
}

}  // namespace

void FrontendHub::Detach(const zmq::message_t& identity) {
  uint32_t id = 0;
  if (!ChannelId(identity, &id)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  channels_.erase(id);
}

bool FrontendHub::Reply(const zmq::message_t& identity, FrontendMessage message) {
  uint32_t id = 0;
  if (!ChannelId(identity, &id)) return false;
  // Held while pushing, so Detach cannot return while a reply is on its way into the mailbox.
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = channels_.find(id);
  if (it == channels_.end()) return false;
  it->second->Push(std::move(message));
  return true;
}

}  // namespace torchfarm
