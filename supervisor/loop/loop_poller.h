// LoopPoller: the one wait of the supervisor's loop, over ZeroMQ sockets and plain descriptors
// (doorbells, pipes, signalfd, timerfd), cheaper per turn than zmq::poll.
//
// zmq_poll asks every ZeroMQ socket for its events more than once a wait (about 13
// zmq_getsockopt calls a turn with the loop's five sockets: docs/benchmarks.md, issue 36), and
// builds its own poll list each call. Here each turn asks a socket for ZMQ_FD (cheap: no command
// processing) and ZMQ_EVENTS once before waiting; only a socket whose descriptor fired is asked
// for its events again after.
//
// Why that is enough (ZeroMQ's ZMQ_FD contract): the descriptor is edge-like: it signals that
// the socket has commands to process, and asking ZMQ_EVENTS processes them. A message that
// arrived before the pre-wait check shows in ZMQ_EVENTS (no wait then); one that arrives after
// it signals the descriptor, which wakes ::poll. Sends or receives on a socket between turns may
// consume a signal (they process commands too), which is why the check runs every turn.
//
// A socket that lives as long as the loop may be watched instead (SocketWatch, the supervisor's
// four): the caller keeps the watch and passes, each turn, a count of its sends and receives on
// that socket. The watch remembers the descriptor (asked once) and the last ZMQ_EVENTS answer
// with the count it was given; while the count has not moved and that answer was "no input",
// nothing can have consumed a signal, so the pre-wait question is skipped and the descriptor
// alone wakes the wait. A send or receive the count misses is a message left unseen until the
// next wake-up: every code path that touches such a socket must count (supervisor.h).
//
// Items keep their order and index; the caller reads results by index, as with zmq::poll. A
// list rebuilt writes over the entries of the last (Reset rewinds it): no allocation per turn.
// A caller whose items did not change keeps the list and only moves the watched sockets' counts
// (SetUses), as the supervisor does. Runs on the loop thread only.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace torchfarm {

class LoopPoller {
 public:
  // Empties the list for the next turn (keeps the memory and the descriptor cache). A caller
  // whose list did not change may skip it and keep the items, bringing the watched sockets'
  // counts up to date with SetUses; Wait starts every item's result afresh.
  void Reset() {
    size_ = 0;
    sockets_.clear();
  }
  // Adds a ZeroMQ socket (the void* handle of zmq::socket_t) to wait for input on; null
  // handles are kept as items that are never ready (fixed indices for absent sockets).
  size_t AddSocket(void* socket) {
    Item& item = Push(socket ? SocketDescriptor(socket) : -1);
    if (socket) MarkSocket(item, socket);
    return size_ - 1;
  }
  // What the loop knows of a socket that lives as long as it does (caller-owned, one per socket;
  // see the header comment). A socket closed and another made must get a fresh watch.
  struct SocketWatch {
    int fd = -1;                 // its ZMQ_FD, asked on first use
    uint64_t uses = UINT64_MAX;  // the caller's count at the last ZMQ_EVENTS answer
    bool input = true;           // that answer (true until asked)
    // The owner's reader copes with finding nothing (a first non-blocking receive that may fail
    // with EAGAIN) and reports a drain (DrainedWithoutInput): when the descriptor fires, the
    // socket reads ready without a ZMQ_EVENTS question, and the read itself finds out. Most
    // wake-ups of the job socket carry a request, so that question (~1k instructions) was the
    // read's own work done twice.
    bool probe_by_reading = false;
  };
  // The same for a watched socket: `uses` counts every send and receive the caller made on it
  // (any monotonic count; only a change matters).
  __attribute__((always_inline)) size_t AddSocket(void* socket, SocketWatch* watch, uint64_t uses) {
    if (!socket) {
      Push(-1);
    } else {
      if (watch->fd < 0) watch->fd = SocketDescriptor(socket);
      Item& item = Push(watch->fd);
      MarkSocket(item, socket);
      item.watch = watch;
      item.uses = uses;
    }
    return size_ - 1;
  }
  // A watched socket's count for this turn, when the list is kept from one turn to the next
  // (no Reset): item `index` must have been added with a watch.
  void SetUses(size_t index, uint64_t uses) { items_[index].uses = uses; }
  // The caller's own non-blocking receive on a watched socket just failed with EAGAIN, with the
  // socket's count at `uses` after it: libzmq processed the socket's commands and found no
  // message, as a ZMQ_EVENTS question would have. Remembered as that answer, so the next turn
  // asks nothing before its wait unless the count moves again (~1k instructions a turn that
  // drained the job socket; issue 36).
  static void DrainedWithoutInput(SocketWatch* watch, uint64_t uses) {
    watch->uses = uses;
    watch->input = false;
  }
  // Adds a plain descriptor to wait for input on (a negative one is never ready).
  __attribute__((always_inline)) size_t AddDescriptor(int fd) {
    Push(fd);
    return size_ - 1;
  }

  // Waits until an item is ready or `timeout` passes (negative: no limit). Returns false with
  // errno set when the wait failed (EINTR included); every item then reads not ready.
  bool Wait(std::chrono::milliseconds timeout);

  // After Wait: whether item `index` has input (a socket: a message can be received without
  // blocking; a descriptor: POLLIN).
  // A descriptor's answer is read from poll(2)'s own result: Wait copies nothing for it.
  bool Readable(size_t index) const {
    if (index >= size_) return false;
    const Item& item = items_[index];
    return item.socket ? item.readable : (pollfds_[index].revents & POLLIN) != 0;
  }
  // After Wait: a descriptor's poll(2) revents (POLLERR, POLLHUP), 0 for a socket.
  short DescriptorEvents(size_t index) const {
    return index < size_ && items_[index].socket == nullptr ? pollfds_[index].revents : 0;
  }
  size_t size() const { return size_; }
  // ZMQ_EVENTS questions asked since the start (tests; the cost this class saves).
  uint64_t questions() const { return questions_; }

  // The socket's ZMQ_FD (cheap: no command processing); -1 when the question fails.
  static int SocketDescriptor(void* socket);

 private:
  struct Item {
    void* socket = nullptr;  // null: a plain descriptor
    int fd = -1;             // the descriptor polled (the socket's ZMQ_FD for a socket)
    SocketWatch* watch = nullptr;
    uint64_t uses = 0;      // a watched socket's count this turn
    bool readable = false;  // a socket's answer after Wait (a descriptor's is in pollfds_)
  };
  // A new item polling `fd` (its other fields at their defaults), and its pollfd. A rebuilt list
  // (~9 items) writes over the entries of the last one, and the vectors
  // grow only past their longest list (issue 36: push_back cost ~40 instructions an item). It and
  // the Add methods are forced inline: left to itself the compiler made out-of-line copies, and
  // the calls cost more than the work.
  __attribute__((always_inline)) Item& Push(int fd) {
    if (size_ == items_.size()) Grow();
    pollfds_[size_] = {fd, POLLIN, 0};
    Item& item = items_[size_++];
    item = Item{};
    item.fd = fd;
    return item;
  }
  // One more entry in both vectors; out of line, so Push stays small enough to inline.
  void Grow();
  // Makes the item just pushed a socket's; Wait asks only these (sockets_) before its poll.
  __attribute__((always_inline)) void MarkSocket(Item& item, void* socket) {
    item.socket = socket;
    sockets_.push_back(static_cast<uint32_t>(size_ - 1));
  }
  // ZMQ_EVENTS & ZMQ_POLLIN; false when the question fails (a closed socket).
  static bool SocketHasInput(void* socket);
  // SocketHasInput, counted, and remembered in a watched item's watch.
  bool AskInput(const Item& item);

  std::vector<Item> items_;  // [0, size_) this turn's; the rest left from longer lists
  std::vector<pollfd> pollfds_;
  // The indices of this list's socket items (the loop has ~5 among ~10 items): the only ones
  // Wait looks at before and after its poll (issue 36: a pass over every item each way was
  // ~300 instructions a turn).
  std::vector<uint32_t> sockets_;
  size_t size_ = 0;
  uint64_t questions_ = 0;
};

}  // namespace torchfarm
