// EventRing: the farm's recent events as an operator reads them on the dashboard (issue 33):
// worker exits with their cause, restarts, kills, spare promotions, rollouts, reloads, model
// loads and unloads, refused connections. Bounded: it keeps the last `capacity` events and drops
// the oldest, so it costs the same after a week as after a minute.
//
// Each event has a sequence number (1, 2, ... never reused: a reader that saw up to N asks for
// what came after), the wall-clock time in ms since the epoch, a kind (one word: "exit",
// "restart", "kill", "promotion", "rollout", "reload", "load", "unload", "scale", "drain",
// "refused"), the model and worker it concerns (empty, -1 when none) and a sentence. Loop thread
// only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace torchfarm {

struct RingEvent {
  uint64_t seq = 0;
  int64_t time_ms = 0;  // wall clock, ms since the epoch
  std::string kind;
  std::string model;
  int worker = -1;
  std::string text;
};

class EventRing {
 public:
  static constexpr size_t kDefaultCapacity = 256;
  // Longer texts are cut (a worker's kill reason can quote what it printed).
  static constexpr size_t kMaxTextBytes = 512;

  explicit EventRing(size_t capacity = kDefaultCapacity);

  void Add(std::string kind, std::string text, std::string model = {}, int worker = -1);

  // Newest first: at most `limit` events with seq > `after`.
  // [{"seq", "time_ms", "kind", "model", "worker", "text"}...]; "model" and "worker" are left
  // out when the event has none.
  nlohmann::json ToJson(size_t limit = kDefaultCapacity, uint64_t after = 0) const;

  size_t size() const { return events_.size(); }
  size_t capacity() const { return capacity_; }
  uint64_t last_seq() const { return next_seq_ - 1; }
  const std::deque<RingEvent>& events() const { return events_; }  // oldest first

  // Tests: where the wall clock comes from (default: the system clock).
  void set_wall_clock(std::function<int64_t()> now_ms) { now_ms_ = std::move(now_ms); }

 private:
  size_t capacity_;
  uint64_t next_seq_ = 1;
  std::deque<RingEvent> events_;
  std::function<int64_t()> now_ms_;
};

}  // namespace torchfarm
