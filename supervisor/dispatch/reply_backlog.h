// How many replies each ZeroMQ client has not taken off the job socket yet, and how many bytes.
//
// A ROUTER socket queues replies to each peer in a pipe of its own; a client that stops reading
// fills its pipe and then its connection's kernel buffers, and everything in the pipe stays in
// the supervisor's memory (or pins a worker's response slot,
// supervisor/workers/pinned_response_ring.h). libzmq does not say how full a pipe is, so the reply
// writer counts it: the header frame of each reply is a message whose free callback (libzmq's I/O
// thread, once the frame is taken from the pipe for the wire) takes the reply off its client's
// count. Frames leave a pipe in order, so the count is the replies whose header libzmq has not
// taken yet: at most the reply being written (its data frames) is outside it.
//
// Owns: a counter per client routing id (shared with the messages in flight; an entry is
// forgotten once its client has nothing outstanding). Threads: the loop thread calls everything;
// libzmq's I/O threads run the free callback (two atomic subtractions and a delete).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include <zmq.hpp>

namespace torchfarm {

class ReplyBacklog {
 public:
  struct Counts {
    int64_t replies = 0;
    int64_t bytes = 0;
  };

  // The header frame of a reply to the client with routing id `client`, counted against that
  // client until libzmq frees it (sent, or dropped unsent): the header's own bytes and
  // `frame_bytes` (the reply's other frames). Its text is written in place: `write(out)` puts at
  // most `bound` bytes at `out`, in the block the message owns, and returns their end (one
  // allocation a reply: issue 36).
  template <typename Write>
  zmq::message_t TrackedHeader(std::string_view client, size_t bound, uint64_t frame_bytes,
                               const Write& write) {
    Block* block = NewBlock(client, bound);
    char* text = TextOf(block);
    size_t size = 0;
    try {
      size = static_cast<size_t>(write(text) - text);
    } catch (...) {
      Discard(block);  // not counted yet: only the memory goes
      throw;
    }
    return Track(block, size, frame_bytes);
  }
  // A writer for a header already made: copies it.
  struct CopiedText {
    std::string_view text;
    char* operator()(char* out) const {
      if (!text.empty()) std::memcpy(out, text.data(), text.size());
      return out + text.size();
    }
  };
  // The same for a header already made.
  zmq::message_t TrackedHeader(std::string_view client, std::string_view header,
                               uint64_t frame_bytes) {
    return TrackedHeader(client, header.size(), frame_bytes, CopiedText{header});
  }
  // What `client` has not taken yet.
  Counts Of(std::string_view client) const;
  // What every client has not taken yet, together.
  Counts Total() const;
  // Forgets clients with nothing outstanding; returns how many clients remain.
  size_t Sweep();
  size_t clients() const { return clients_.size(); }

 private:
  struct Counter {
    std::atomic<int64_t> replies{0};
    std::atomic<int64_t> bytes{0};
  };
  struct Block;  // one tracked header: its counter and bytes, its text after it (reply_backlog.cc)
  // A block with room for `bound` bytes of text, its client's counter found (made when new).
  Block* NewBlock(std::string_view client, size_t bound);
  static char* TextOf(Block* block);
  // Frees a block no message owns (nothing counted it).
  static void Discard(Block* block);
  // The message owning `block`, its text `size` bytes long, counted with `frame_bytes` more.
  zmq::message_t Track(Block* block, size_t size, uint64_t frame_bytes);
  static void Free(void* data, void* hint);
  // The entry of `client`, null when it has none (create: made then). The last one found is
  // remembered: a reply looks its client up three times (admission, the pin decision, the
  // header), and the next request is usually the same client's (issue 36).
  std::shared_ptr<Counter>* Find(std::string_view client, bool create) const;

  mutable std::unordered_map<std::string, std::shared_ptr<Counter>> clients_;
  // Find's memory: an element of clients_ (stable until erased; Sweep forgets it) and its key.
  mutable std::shared_ptr<Counter>* last_ = nullptr;
  mutable std::string last_client_;
};

}  // namespace torchfarm
