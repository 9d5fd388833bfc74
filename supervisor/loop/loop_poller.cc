#include "supervisor/loop/loop_poller.h"

#include <zmq.h>

#include <cerrno>

namespace torchfarm {

void LoopPoller::Grow() {
  // pollfds_ first: if items_ then fails to grow, pollfds_ is one longer, never shorter.
  pollfds_.emplace_back();
  items_.emplace_back();
}

int LoopPoller::SocketDescriptor(void* socket) {
  int fd = -1;
  size_t size = sizeof(fd);
  return zmq_getsockopt(socket, ZMQ_FD, &fd, &size) == 0 ? fd : -1;
}

bool LoopPoller::SocketHasInput(void* socket) {
  int events = 0;
  size_t size = sizeof(events);
  return zmq_getsockopt(socket, ZMQ_EVENTS, &events, &size) == 0 && (events & ZMQ_POLLIN) != 0;
}

bool LoopPoller::AskInput(const Item& item) {
  ++questions_;
  const bool input = SocketHasInput(item.socket);
  if (item.watch) {
    item.watch->uses = item.uses;
    item.watch->input = input;
  }
  return input;
}

bool LoopPoller::Wait(std::chrono::milliseconds timeout) {
  // Messages already queued in a socket: no wait, only a look at the descriptors. A watched
  // socket untouched since it last said "no input" is left to its descriptor.
  bool any_socket_ready = false;
  for (const uint32_t i : sockets_) {
    Item& item = items_[i];
    const bool untouched = item.watch && item.watch->uses == item.uses && !item.watch->input;
    item.readable = !untouched && AskInput(item);
    any_socket_ready |= item.readable;
  }
  // poll(2) writes every entry's revents, which is each descriptor's answer (Readable).
  const int wait_ms = any_socket_ready ? 0 : static_cast<int>(timeout.count());
  if (::poll(pollfds_.data(), size_, wait_ms < 0 ? -1 : wait_ms) < 0) {
    const int error = errno;
    for (size_t i = 0; i < size_; ++i) pollfds_[i].revents = 0;
    for (const uint32_t i : sockets_) items_[i].readable = false;
    errno = error;
    return false;
  }
  for (const uint32_t i : sockets_) {
    Item& item = items_[i];
    if (!item.readable && pollfds_[i].revents != 0) {
      // The descriptor fired: commands to process, perhaps a message. A socket its owner probes
      // by reading is left to that read (SocketWatch::probe_by_reading).
      item.readable = (item.watch && item.watch->probe_by_reading) || AskInput(item);
    }
  }
  return true;
}

}  // namespace torchfarm
