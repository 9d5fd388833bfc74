// One place for a worker zygote (ipc/zygote_protocol.h) in the supervisor's ZygotePool
// (zygote_pool.h): the row that outlives each zygote process in it.
//
// Owns: the zygote's pid, the supervisor's end of its launch channel, its restart backoff and its
// counters. Runs on the supervisor's loop thread; a launch or a fork request blocks the loop for
// one round trip (a fork in the zygote, ~milliseconds), bounded by kAnswerTimeout.
//
// States; every change goes through the private TransitionTo, which checks
// ZygoteTransitionAllowed and logs "zygote <role> pid from->to why":
//
//            Exec / ForkFrom             "zygote_ready"
//   kDown ------------------> kStarting --------------> kReady
//     ^  ^                      |    |                    |   |
//     |  +--- exit (reaped) ----+    | not ready in time  |   | a request unanswered (stuck) or
//     |  +--- exit (reaped) ---------|--------------------+   | undeliverable; channel closed by
//     |                              v                        v the zygote; farm stops
//     +------ exit (reaped) ---- kStopping <------------------+
//
// kDown has restart_at (zygote_policy.h decides it from the exit); kStarting has a ready deadline
// (kZygoteExecReadyTimeout or kZygoteForkReadyTimeout); kStopping waits for the SIGCHLD of a
// process that was killed, or that closed its channel (SIGKILLed after kStopGrace).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "supervisor/workers/process_launcher.h"
#include "supervisor/workers/zygote_policy.h"

namespace torchfarm {

class Zygote {
 public:
  // A fork and a double fork take milliseconds; the loop waits no longer than this for one.
  static constexpr Millis kAnswerTimeout{1'000};
  // A zygote whose channel closed (it died or is dying) is SIGKILLed if not reaped by then.
  static constexpr Millis kStopGrace{5'000};

  explicit Zygote(ZygoteRole role) : role_(role) {}
  ~Zygote() { Stop(TimePoint{}, "destroyed", true); }
  Zygote(const Zygote&) = delete;
  Zygote& operator=(const Zygote&) = delete;

  // kDown -> kStarting: execs `worker_binary` as `torchfarm-zygote --zygote 3`.
  Status Exec(const std::string& worker_binary, TimePoint now, const std::string& why);
  // kDown -> kStarting: asks `parent` (ready) to fork this place's zygote. A failure leaves this
  // place kDown with its next start decided (DecideZygoteStartFailure).
  Status ForkFrom(Zygote& parent, TimePoint now, const std::string& why);
  // kStarting: reads the ready message if it has come (-> kReady); past the ready deadline the
  // process is killed (-> kStopping).
  void Poll(TimePoint now);
  // kReady: forks a worker with `argv`, its descriptors at their targets and `env` applied.
  // Errors: Unavailable when nothing was forked (the caller may exec instead); DeadlineExceeded
  // when the request went out but no answer came: a worker may exist with these descriptors, so
  // the caller must not exec with them (it backs off and relaunches with new ones; an orphan
  // hears no acks for its generation and exits). A zygote that failed goes to kStopping.
  Status Launch(const std::vector<std::string>& argv, const std::vector<FdMapping>& fds,
                const std::vector<std::string>& env, TimePoint now, pid_t* pid);
  // A child exited: true when it was this place's zygote (-> kDown, restart_at decided).
  bool OnExit(pid_t pid, int wait_status, TimePoint now);
  // Closes the channel (the zygote exits) and SIGKILLs it; no wait (-> kStopping). `expected`
  // (the farm stops) logs at info, anything else at warn.
  void Stop(TimePoint now, const std::string& why, bool expected = false);

  ZygoteRole role() const { return role_; }
  ZygoteState state() const { return state_; }
  bool ready() const { return state_ == ZygoteState::kReady; }
  pid_t pid() const { return pid_; }
  // The channel to poll for the ready message while kStarting; -1 otherwise.
  int starting_channel() const { return state_ == ZygoteState::kStarting ? channel_.get() : -1; }
  TimePoint restart_at() const { return restart_at_; }
  // When Poll must run next for this place (a ready deadline); TimePoint::max() when none.
  TimePoint next_deadline() const;
  int restarts() const { return restarts_; }
  uint64_t launches() const { return launches_; }
  nlohmann::json ToJson(TimePoint now) const;

 private:
  Status Started(pid_t pid, UniqueFd channel, const char* how, TimePoint now,
                 const std::string& why);
  // One request and its answer; on failure the zygote is given up (-> kStopping).
  Status Exchange(const std::string& message, const std::vector<int>& fds, TimePoint now,
                  nlohmann::json* answer);
  void TransitionTo(ZygoteState to, TimePoint now, const std::string& why, bool expected = false);
  void NoteStartFailure(bool parent_lost, TimePoint now, const std::string& what,
                        const std::string& error);
  // The channel failed on the zygote's side (end of file): -> kStopping without a kill.
  void Lose(TimePoint now, const std::string& why);

  const ZygoteRole role_;
  ZygoteState state_ = ZygoteState::kDown;
  TimePoint state_since_{};
  pid_t pid_ = -1;
  UniqueFd channel_;
  std::string started_by_;      // "exec" or "fork"
  bool kill_sent_ = false;      // this process was SIGKILLed by the supervisor
  bool reached_ready_ = false;  // this process said it can fork
  TimePoint ready_deadline_ = TimePoint::max();
  TimePoint stop_deadline_ = TimePoint::max();
  TimePoint restart_at_ = TimePoint::min();  // due at once: the first start
  Millis backoff_ = kZygoteInitialBackoff;
  bool started_once_ = false;
  int restarts_ = 0;
  uint64_t launches_ = 0;
  std::string last_exit_;
};

}  // namespace torchfarm
