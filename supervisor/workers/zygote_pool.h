// The supervisor's worker zygotes (config worker_launch "zygote"): two pre-started worker
// processes that fork workers (ipc/zygote_protocol.h), so that a worker starts in tens of
// milliseconds instead of the ~1 s of an exec and a LibTorch load, even while one zygote is being
// replaced. Exec (process_launcher.h) is the last resort, used only while neither is ready.
//
// Owns: the two places (zygote.h), kPrimary and kStandby. Runs on the supervisor's loop thread:
// Maintain each loop turn (reads ready messages, starts due places), Launch from WorkerSlot,
// OnExit from the SIGCHLD handler; each blocks the loop at most one round trip to a zygote.
//
// Which process runs what:
//   supervisor (a child subreaper) --exec--> primary `torchfarm-zygote --zygote 3`
//   a ready zygote --fork, fork--> intermediate (exits at once) --> worker, or another zygote
//   so every worker and every forked zygote is re-parented to the supervisor: its SIGCHLD, its
//   PR_SET_PDEATHSIG and `ps` see it as the supervisor's child, like an exec'd worker.
//
// Who starts whom (zygote_policy.h, PlanZygoteStart, pure): a place that is down and due forks
// from the other zygote when that one is ready (milliseconds; a forked zygote shares its parent's
// LibTorch pages copy-on-write, so the standby costs little memory: docs/benchmarks.md). When
// neither is ready, only the primary execs; the standby waits for a ready zygote to fork from.
// At start: the primary execs, and the standby forks from it once it is ready.
//
// Restart timing (DecideZygoteRestart): a zygote that was ready and is killed from outside is
// replaced at once, by a fork from the other; one that dies before ready backs off (1 s, doubling
// to 60 s while it dies on its own), so a broken LibTorch never costs a core forever.
//
// Launches go to the primary when it is ready, else to the standby. Faults:
//   one zygote killed (or killed mid-launch)  the launch answers DeadlineExceeded (the slot backs
//                                             off and relaunches, to the other zygote); the dead
//                                             one is forked again from the other at once
//   both killed at once                       workers exec while the primary execs (~1 s); the
//                                             standby forks from it once it is ready
//   a zygote stopped (SIGSTOP) or stuck       the launch times out (kAnswerTimeout), the zygote is
//                                             killed and replaced after 1 s; launches go to the
//                                             other
//   the replacement killed while it starts    its place backs off without doubling (an outside
//                                             kill says nothing about the zygote) and tries again
#pragma once

#include <sys/types.h>

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "supervisor/workers/process_launcher.h"
#include "supervisor/workers/zygote.h"

namespace torchfarm {

class ZygotePool {
 public:
  ZygotePool() = default;
  ZygotePool(const ZygotePool&) = delete;
  ZygotePool& operator=(const ZygotePool&) = delete;

  // Makes this process a child subreaper (so forked workers and zygotes become its children),
  // execs the primary and forks the standby from it; waits up to `wait_ready` (real time) for
  // both, so that the first workers fork too. A zygote slower than that is used once ready; one
  // that cannot start is retried by Maintain. Errors only when this process cannot be a
  // subreaper (workers then exec).
  Status Start(const std::string& worker_binary, Millis wait_ready, const TimeSource& clock);
  // Reads ready messages, kills zygotes past their deadlines and starts the places that are due.
  void Maintain(TimePoint now);
  // Whether a launch may go to a zygote now.
  bool Ready() const { return primary_.ready() || standby_.ready(); }
  // Forks a worker from a ready zygote (the primary first). Errors as Zygote::Launch; when one
  // zygote turns out unreachable before anything went out, the other is asked.
  Status Launch(const std::vector<std::string>& argv, const std::vector<FdMapping>& fds,
                const std::vector<std::string>& env, TimePoint now, pid_t* pid);
  // A child exited: true when it was a zygote.
  bool OnExit(pid_t pid, int wait_status, TimePoint now);
  // Closes both channels (the zygotes exit) and kills them; no wait.
  void Stop(TimePoint now);

  // Channels to poll for a ready message (of starting zygotes), so the loop wakes for them: one
  // place per zygote, -1 where it is not starting. A fixed array, not a list: the loop asks every
  // turn (issue 36).
  std::array<int, 2> StartingChannels() const {
    return {primary_.starting_channel(), standby_.starting_channel()};
  }
  // The earliest time after `now` Maintain has something to do (a restart, a deadline).
  TimePoint NextDeadline(TimePoint now) const;

  bool enabled() const { return !worker_binary_.empty(); }
  // Stats "supervisor.zygote": the summary (pid launches go to, ready, launches, restarts) with
  // "zygotes": each place's role, state, pid, started_by, launches, restarts, last_exit.
  nlohmann::json ToJson(TimePoint now) const;
  const Zygote& primary() const { return primary_; }
  const Zygote& standby() const { return standby_; }

 private:
  void StartIfDue(Zygote& place, Zygote& other, TimePoint now);

  std::string worker_binary_;
  Zygote primary_{ZygoteRole::kPrimary};
  Zygote standby_{ZygoteRole::kStandby};
};

}  // namespace torchfarm
