// The supervisor's side of the worker zygote (ipc/zygote_protocol.h): starts the zygote process,
// asks it to fork workers, and notices when it dies.
//
// Owns: the zygote's pid and the supervisor's end of the launch channel. Runs on the supervisor's
// loop thread; a launch blocks the loop for one round trip (a fork in the zygote, ~milliseconds),
// bounded by kAnswerTimeout.
//
// A worker forked from the zygote starts in tens of milliseconds instead of the second exec,
// loading and initialising LibTorch cost (docs/benchmarks.md). When the zygote is not ready, dead
// or stuck the caller execs the worker as before (process_launcher.h); a dead zygote is started
// again after a backoff, in the background.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "supervisor/process_launcher.h"

namespace torchfarm {

class Zygote {
 public:
  // A fork and a double fork take milliseconds; the loop waits no longer than this for one.
  static constexpr Millis kAnswerTimeout{1'000};
  // A dead zygote is started again after kRestartBackoff, doubling (to kMaxRestartBackoff) while
  // it keeps dying before it is ready (a broken LibTorch must not cost a core forever).
  static constexpr Millis kRestartBackoff{1'000};
  static constexpr Millis kMaxRestartBackoff{60'000};

  Zygote() = default;
  ~Zygote() { Stop(); }
  Zygote(const Zygote&) = delete;
  Zygote& operator=(const Zygote&) = delete;

  // Makes this process a child subreaper (so forked workers become its children) and starts the
  // zygote; `wait_ready` > 0 waits that long for it to say it can fork.
  Status Start(const std::string& worker_binary, Millis wait_ready);
  // Whether a launch may go to the zygote now (reads its ready message if it has come).
  bool Ready();
  // Forks a worker with `argv`, its descriptors at their targets and `env` applied. Errors:
  // Unavailable when nothing was forked (the caller may exec instead); DeadlineExceeded when the
  // request went out but no answer came: a worker may exist with these descriptors, so the caller
  // must not exec with them (it backs off and relaunches with new ones; an orphan hears no acks
  // for its generation and exits). Both stop a zygote that failed (it restarts later).
  Status Launch(const std::vector<std::string>& argv, const std::vector<FdMapping>& fds,
                const std::vector<std::string>& env, pid_t* pid);
  // A child exited: true when it was the zygote (it is started again after a backoff).
  bool OnExit(pid_t pid, int wait_status, TimePoint now);
  // Starts a dead zygote again once its backoff is over (without waiting for it).
  void Maintain(TimePoint now);
  // Closes the channel (the zygote exits) and kills it if it lingers; no wait.
  void Stop();

  bool enabled() const { return !worker_binary_.empty(); }
  pid_t pid() const { return pid_; }
  int restarts() const { return restarts_; }
  uint64_t launches() const { return launches_; }

 private:
  Status Spawn();

  std::string worker_binary_;
  pid_t pid_ = -1;
  UniqueFd channel_;
  bool ready_ = false;
  bool ever_ready_ = false;  // this zygote process said it can fork
  TimePoint restart_at_ = TimePoint::max();
  Millis next_backoff_ = kRestartBackoff;
  int restarts_ = 0;
  uint64_t launches_ = 0;
};

}  // namespace torchfarm
