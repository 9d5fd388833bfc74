#include "torchfarm/endpoint_pool.h"

#include <algorithm>
#include <limits>

namespace torchfarm {

EndpointPool::EndpointPool(size_t count, const EndpointPoolOptions& options)
    : options_(options), endpoints_(count) {}

int EndpointPool::Pick(const std::vector<bool>& exclude, TimePoint now) {
  const size_t n = endpoints_.size();
  int best = -1;
  // Lower is better: (cooling down, outstanding). Ties keep the first found from the cursor on,
  // and the cursor moves past every pick, which makes equals take turns.
  std::pair<bool, int> best_key{true, std::numeric_limits<int>::max()};
  bool any_live = false;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (cursor_ + k) % n;
    const Endpoint& e = endpoints_[i];
    if (e.state != State::kLive) continue;
    any_live = true;
    if (i < exclude.size() && exclude[i]) continue;
    std::pair<bool, int> key{now < e.cooldown_until, e.outstanding};
    if (best < 0 || key < best_key) {
      best = static_cast<int>(i);
      best_key = key;
    }
  }
  if (best < 0) return any_live ? kAllRefused : kNoneLive;
  cursor_ = (static_cast<size_t>(best) + 1) % n;
  return best;
}

void EndpointPool::StartOwing(Endpoint& e, TimePoint now) {
  if (!e.owing_since) e.owing_since = now;
}

void EndpointPool::OnRequestSent(int endpoint, TimePoint now) {
  Endpoint& e = endpoints_[Index(endpoint)];
  ++e.outstanding;
  StartOwing(e, now);
}

void EndpointPool::OnRequestDone(int endpoint) {
  Endpoint& e = endpoints_[Index(endpoint)];
  if (e.outstanding > 0) --e.outstanding;
  if (e.outstanding == 0 && e.state == State::kLive) e.owing_since.reset();
}

bool EndpointPool::OnMessage(int endpoint, TimePoint now) {
  Endpoint& e = endpoints_[Index(endpoint)];
  const bool readmitted = e.state == State::kEjected;
  e.state = State::kLive;
  e.backoff = Millis(0);
  // It just spoke: whatever it still owes is owed from now on.
  if (e.outstanding > 0) {
    e.owing_since = now;
  } else {
    e.owing_since.reset();
  }
  return readmitted;
}

void EndpointPool::OnRefused(int endpoint, TimePoint now) {
  endpoints_[Index(endpoint)].cooldown_until = now + options_.refusal_cooldown;
}

void EndpointPool::EjectNow(Endpoint& e, TimePoint now) {
  e.state = State::kEjected;
  e.outstanding = 0;  // the caller moves them elsewhere
  e.owing_since.reset();
  e.backoff = options_.probe_backoff;
  e.next_probe = now + e.backoff;
}

bool EndpointPool::Eject(int endpoint, TimePoint now) {
  Endpoint& e = endpoints_[Index(endpoint)];
  if (e.state == State::kEjected) return false;
  EjectNow(e, now);
  return true;
}

EndpointPool::Due EndpointPool::Tick(TimePoint now) {
  Due due;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    Endpoint& e = endpoints_[i];
    const int index = static_cast<int>(i);
    if (e.state == State::kEjected) {
      if (now >= e.next_probe) due.probe.push_back(index);
      continue;
    }
    if (!e.owing_since) continue;
    const auto silent = now - *e.owing_since;
    if (silent >= options_.eject_after) {
      EjectNow(e, now);
      due.eject.push_back(index);
    } else if (silent >= options_.heartbeat && now - e.last_probe >= options_.heartbeat) {
      due.probe.push_back(index);
    }
  }
  return due;
}

void EndpointPool::OnProbeSent(int endpoint, TimePoint now) {
  Endpoint& e = endpoints_[Index(endpoint)];
  if (e.state == State::kEjected) {
    e.next_probe = now + e.backoff;
    e.backoff = std::min(e.backoff * 2, options_.max_probe_backoff);
    return;
  }
  e.last_probe = now;
  StartOwing(e, now);
}

std::optional<TimePoint> EndpointPool::NextDeadline() const {
  std::optional<TimePoint> next;
  auto consider = [&next](TimePoint t) {
    if (!next || t < *next) next = t;
  };
  for (const Endpoint& e : endpoints_) {
    if (e.state == State::kEjected) {
      consider(e.next_probe);
    } else if (e.owing_since) {
      consider(*e.owing_since + options_.eject_after);
      consider(std::max(*e.owing_since + options_.heartbeat, e.last_probe + options_.heartbeat));
    }
  }
  return next;
}

int EndpointPool::live_count() const {
  return static_cast<int>(std::count_if(endpoints_.begin(), endpoints_.end(),
                                        [](const Endpoint& e) { return e.state == State::kLive; }));
}

}  // namespace torchfarm
