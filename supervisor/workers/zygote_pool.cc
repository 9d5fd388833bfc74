#include "supervisor/workers/zygote_pool.h"

#include <poll.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace torchfarm {

Status ZygotePool::Start(const std::string& worker_binary, Millis wait_ready,
                         const TimeSource& clock) {
  // Workers are a zygote's grandchildren; as a subreaper this process inherits them when their
  // parent exits, and sees their SIGCHLD like an exec'd worker's.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return Internal(std::string("prctl(PR_SET_CHILD_SUBREAPER): ") + std::strerror(errno));
  }
  worker_binary_ = worker_binary;
  const TimePoint deadline = clock.Now() + wait_ready;
  // An exec that fails here is retried by Maintain after its backoff, like any later one.
  Maintain(clock.Now());
  for (TimePoint now = clock.Now(); now < deadline; now = clock.Now()) {
    Maintain(now);
    if (primary_.ready() && standby_.ready()) break;
    std::vector<pollfd> channels;
    for (int fd : StartingChannels()) {
      if (fd >= 0) channels.push_back({fd, POLLIN, 0});
    }
    if (channels.empty()) break;  // nothing on the way (a fork failed): workers exec until then
    const auto left = std::chrono::duration_cast<Millis>(deadline - now).count();
    ::poll(channels.data(), channels.size(), static_cast<int>(std::max<int64_t>(left, 1)));
  }
  if (!Ready()) {
    TF_LOG(kWarn) << "worker zygote not ready; workers start by exec until it is"
                  << Kv("pid", primary_.pid()) << Kv("waited_ms", wait_ready.count());
  }
  return Status::Ok();
}

void ZygotePool::StartIfDue(Zygote& place, Zygote& other, TimePoint now) {
  if (place.state() != ZygoteState::kDown) return;
  const ZygoteStartPlan plan =
      PlanZygoteStart(place.role(), now, place.restart_at(), other.state());
  if (plan.how == ZygoteStartHow::kFork) {
    (void)place.ForkFrom(other, now, plan.why);  // a failure is logged and its retry scheduled
  } else if (plan.how == ZygoteStartHow::kExec) {
    (void)place.Exec(worker_binary_, now, plan.why);
  }
}

void ZygotePool::Maintain(TimePoint now) {
  if (!enabled()) return;
  primary_.Poll(now);
  standby_.Poll(now);
  StartIfDue(primary_, standby_, now);
  StartIfDue(standby_, primary_, now);
  // A fork is ready in milliseconds: read its ready message now if it has come already.
  primary_.Poll(now);
  standby_.Poll(now);
}

Status ZygotePool::Launch(const std::vector<std::string>& argv, const std::vector<FdMapping>& fds,
                          const std::vector<std::string>& env, TimePoint now, pid_t* pid) {
  Status s = Unavailable("zygote not ready");
  for (Zygote* z : {&primary_, &standby_}) {
    if (!z->ready()) continue;
    s = z->Launch(argv, fds, env, now, pid);
    // Only a zygote found unreachable before the request went out sends the launch elsewhere:
    // after a refused fork (EAGAIN) the other would refuse too, and after DeadlineExceeded these
    // descriptors may already be a worker's.
    if (s.ok() || s.code() != StatusCode::kUnavailable || z->ready()) return s;
  }
  return s;
}

bool ZygotePool::OnExit(pid_t pid, int wait_status, TimePoint now) {
  return primary_.OnExit(pid, wait_status, now) || standby_.OnExit(pid, wait_status, now);
}

void ZygotePool::Stop(TimePoint now) {
  primary_.Stop(now, "the farm stops", true);
  standby_.Stop(now, "the farm stops", true);
}

TimePoint ZygotePool::NextDeadline(TimePoint now) const {
  if (!enabled()) return TimePoint::max();
  TimePoint next = std::min(primary_.next_deadline(), standby_.next_deadline());
  for (const Zygote* z : {&primary_, &standby_}) {
    // A place that is due but waits for the other zygote is woken by that one's ready message
    // (StartingChannels) or SIGCHLD, not by its own past restart time: that would spin the loop.
    if (z->state() == ZygoteState::kDown && z->restart_at() > now) {
      next = std::min(next, z->restart_at());
    }
  }
  return next;
}

nlohmann::json ZygotePool::ToJson(TimePoint now) const {
  const Zygote& next = primary_.ready() || !standby_.ready() ? primary_ : standby_;
  nlohmann::json places = nlohmann::json::array({primary_.ToJson(now), standby_.ToJson(now)});
  return {{"pid", next.pid()},
          {"ready", Ready()},
          {"launches", primary_.launches() + standby_.launches()},
          {"restarts", primary_.restarts() + standby_.restarts()},
          {"zygotes", enabled() ? places : nlohmann::json::array()}};
}

}  // namespace torchfarm
