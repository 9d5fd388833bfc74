#include "supervisor/dispatch/reply_backlog.h"

#include <new>
#include <utility>

namespace torchfarm {

struct ReplyBacklog::Block {
  std::shared_ptr<Counter> counter;
  int64_t bytes = 0;
  // The header's text follows the block, in the same allocation (TextOf).
};

char* ReplyBacklog::TextOf(Block* block) { return reinterpret_cast<char*>(block + 1); }

void ReplyBacklog::Discard(Block* block) {
  block->~Block();
  ::operator delete(block);
}

void ReplyBacklog::Free(void* /*data*/, void* hint) {
  // libzmq's I/O thread (or the loop thread, for a message that was never queued).
  auto* block = static_cast<Block*>(hint);
  block->counter->replies.fetch_sub(1, std::memory_order_relaxed);
  block->counter->bytes.fetch_sub(block->bytes, std::memory_order_relaxed);
  Discard(block);  // the shared_ptr's count is atomic: the loop may be sweeping meanwhile
}

ReplyBacklog::Block* ReplyBacklog::NewBlock(std::string_view client, size_t bound) {
  std::shared_ptr<Counter>& counter = *Find(client, true);
  if (!counter) counter = std::make_shared<Counter>();
  void* memory = ::operator new(sizeof(Block) + bound);
  Block* block = new (memory) Block;
  block->counter = counter;
  return block;
}

zmq::message_t ReplyBacklog::Track(Block* block, size_t size, uint64_t frame_bytes) {
  block->bytes = static_cast<int64_t>(size + frame_bytes);
  block->counter->replies.fetch_add(1, std::memory_order_relaxed);
  block->counter->bytes.fetch_add(block->bytes, std::memory_order_relaxed);
  // From here the message owns the block: its destructor or libzmq runs Free exactly once.
  return zmq::message_t(TextOf(block), size, &Free, block);
}

std::shared_ptr<ReplyBacklog::Counter>* ReplyBacklog::Find(std::string_view client,
                                                           bool create) const {
  if (last_ && client == last_client_) return last_;  // no key string made (issue 36)
  std::shared_ptr<Counter>* entry = nullptr;
  const std::string key(client);
  if (create) {
    entry = &clients_[key];
  } else if (auto it = clients_.find(key); it != clients_.end()) {
    entry = &it->second;
  }
  if (entry) {
    last_ = entry;
    last_client_ = key;
  }
  return entry;
}

ReplyBacklog::Counts ReplyBacklog::Of(std::string_view client) const {
  const std::shared_ptr<Counter>* entry = Find(client, false);
  if (!entry || !*entry) return {};
  return {(*entry)->replies.load(std::memory_order_relaxed),
          (*entry)->bytes.load(std::memory_order_relaxed)};
}

ReplyBacklog::Counts ReplyBacklog::Total() const {
  Counts total;
  for (const auto& [client, counter] : clients_) {
    total.replies += counter->replies.load(std::memory_order_relaxed);
    total.bytes += counter->bytes.load(std::memory_order_relaxed);
  }
  return total;
}

size_t ReplyBacklog::Sweep() {
  last_ = nullptr;  // its element may go below
  for (auto it = clients_.begin(); it != clients_.end();) {
    // Only blocks add references, and only this thread makes blocks: one reference left is ours.
    if (it->second.use_count() == 1) {
      it = clients_.erase(it);
    } else {
      ++it;
    }
  }
  return clients_.size();
}

}  // namespace torchfarm
