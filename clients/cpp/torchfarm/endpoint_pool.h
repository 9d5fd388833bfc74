// The policy half of torchfarm::MultiClient: which supervisor gets the next request, which one is
// presumed dead, and when a dead one is probed again. Pure bookkeeping over endpoint indexes and
// times handed in by the caller: no sockets, no clock of its own, so it is unit-tested on
// simulated time (tests/common/endpoint_pool_test.cc).
//
// Owns: one record per endpoint (state, outstanding requests, when it last owed us an answer,
// probe schedule, refusal cool-down) and the round-robin cursor. Runs on the MultiClient's thread.
//
// Endpoint states:
//
//          silent for eject_after while owing a reply
//   kLive ─────────────────────────────────────────────▶ kEjected ──┐ a probe every backoff
//     ▲      (or the caller ejects it: a send failed)        │   ◀───┘ (doubling up to the max)
//     └──────────── any message from the endpoint ◀─────────┘
//
// "Owing a reply": the endpoint has requests outstanding or a probe unanswered. Every message it
// sends (a result, an error, a probe answer, even a stale reply) proves it alive and restarts the
// silence clock, so a slow model never gets a live supervisor ejected as long as the supervisor
// answers probes, which its main loop does at once. A busy endpoint silent for `heartbeat` is
// probed (at most once per heartbeat) so that proof keeps coming while long requests run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/clock.h"

namespace torchfarm {

struct EndpointPoolOptions {
  Millis heartbeat{500};           // a busy endpoint silent this long is sent a probe
  Millis eject_after{2000};        // silent this long while owing a reply: ejected
  Millis probe_backoff{250};       // first probe of an ejected endpoint comes this long after
  Millis max_probe_backoff{4000};  // the delay doubles per unanswered probe up to this
  Millis refusal_cooldown{
      1000};  // after RESOURCE_EXHAUSTED/UNAVAILABLE: picked only as a last resort
};

class EndpointPool {
 public:
  enum class State { kLive, kEjected };

  // Pick's answer when it returns no endpoint.
  static constexpr int kNoneLive = -1;    // every endpoint is ejected: wait for a probe to succeed
  static constexpr int kAllRefused = -2;  // every live endpoint is in `exclude`: give up

  // Every endpoint starts live (optimistic: the first requests find out).
  EndpointPool(size_t count, const EndpointPoolOptions& options);

  // The endpoint for a request: a live one not in `exclude` (endpoints that refused this request)
  // with the fewest outstanding requests, round-robin among equals; endpoints cooling down after a
  // refusal come last. kNoneLive or kAllRefused when there is none.
  int Pick(const std::vector<bool>& exclude, TimePoint now);

  // A request was sent to `endpoint`.
  void OnRequestSent(int endpoint, TimePoint now);
  // A request of `endpoint` is no longer outstanding there (answered, or moved elsewhere).
  void OnRequestDone(int endpoint);
  // Any message arrived from `endpoint`; readmits it when it was ejected. True if it was.
  bool OnMessage(int endpoint, TimePoint now);
  // The endpoint answered RESOURCE_EXHAUSTED or UNAVAILABLE: it stays live but cools down.
  void OnRefused(int endpoint, TimePoint now);
  // Takes `endpoint` out of rotation now (e.g. a send to it failed); false if already ejected.
  bool Eject(int endpoint, TimePoint now);

  // What time alone decided. The caller sends the probes, calls OnProbeSent for each, and re-sends
  // the requests it had outstanding on each newly ejected endpoint.
  struct Due {
    std::vector<int> eject;  // newly ejected (silent for eject_after while owing a reply)
    std::vector<int> probe;  // a probe should go out now (busy and quiet, or ejected and due)
  };
  Due Tick(TimePoint now);
  void OnProbeSent(int endpoint, TimePoint now);
  // The earliest time Tick may have something to do; nullopt when nothing is scheduled.
  std::optional<TimePoint> NextDeadline() const;

  State state(int endpoint) const { return endpoints_[Index(endpoint)].state; }
  int outstanding(int endpoint) const { return endpoints_[Index(endpoint)].outstanding; }
  int live_count() const;
  size_t size() const { return endpoints_.size(); }
  const EndpointPoolOptions& options() const { return options_; }

 private:
  struct Endpoint {
    State state = State::kLive;
    int outstanding = 0;
    // Since when the endpoint owes a message (a request or probe went out after the last message
    // it sent); nullopt while it owes nothing.
    std::optional<TimePoint> owing_since;
    TimePoint last_probe{};      // live: when the last heartbeat probe went out
    TimePoint next_probe{};      // ejected: when to probe next
    Millis backoff{0};           // ejected: the current probe delay
    TimePoint cooldown_until{};  // refused recently: picked last until then
  };

  size_t Index(int endpoint) const { return static_cast<size_t>(endpoint); }
  void StartOwing(Endpoint& e, TimePoint now);
  void EjectNow(Endpoint& e, TimePoint now);

  EndpointPoolOptions options_;
  std::vector<Endpoint> endpoints_;
  size_t cursor_ = 0;  // where the next round-robin scan starts
};

}  // namespace torchfarm
