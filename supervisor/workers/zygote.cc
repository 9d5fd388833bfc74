#include "supervisor/workers/zygote.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "ipc/zygote_protocol.h"

namespace torchfarm {

namespace {

constexpr int kZygoteChannelFd = 3;

Status MakeChannel(UniqueFd* ours, UniqueFd* theirs) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return Unavailable(std::string("zygote: socketpair: ") + std::strerror(errno));
  }
  *ours = UniqueFd(pair[0]);
  *theirs = UniqueFd(pair[1]);
  return Status::Ok();
}

bool IsReadyMessage(const std::string& payload) {
  auto j = nlohmann::json::parse(payload, nullptr, false);
  return j.is_object() && j.value("type", "") == "zygote_ready";
}

}  // namespace

void Zygote::TransitionTo(ZygoteState to, TimePoint now, const std::string& why, bool expected) {
  if (!ZygoteTransitionAllowed(state_, to)) {
    // A supervisor bug, never a user's doing: say so loudly and keep the old state.
    TF_LOG(kError) << "refused zygote state change" << Kv("role", ZygoteRoleName(role_))
                   << Kv("pid", pid_) << Kv("from", ZygoteStateName(state_))
                   << Kv("to", ZygoteStateName(to)) << Kv("why", why);
    return;
  }
  const bool trouble =
      !expected && (to == ZygoteState::kStopping ||
                    (to == ZygoteState::kDown && state_ != ZygoteState::kStopping));
  TF_LOG_AT(trouble ? LogLevel::kWarn : LogLevel::kInfo)
      << "zygote state" << Kv("role", ZygoteRoleName(role_)) << Kv("pid", pid_)
      << Kv("from", ZygoteStateName(state_)) << Kv("to", ZygoteStateName(to)) << Kv("why", why);
  state_ = to;
  state_since_ = now;
}

void Zygote::NoteStartFailure(bool parent_lost, TimePoint now, const std::string& what,
                              const std::string& error) {
  const ZygoteRestart next = DecideZygoteStartFailure(parent_lost, backoff_, now);
  restart_at_ = next.at;
  backoff_ = next.next_backoff;
  TF_LOG(kWarn) << "zygote start failed" << Kv("role", ZygoteRoleName(role_)) << Kv("how", what)
                << Kv("why", next.why) << Kv("error", error);
}

void Zygote::Lose(TimePoint now, const std::string& why) {
  channel_.Reset();  // it is gone or going; its SIGCHLD says why, or kStopGrace ends the wait
  stop_deadline_ = now + kStopGrace;
  TransitionTo(ZygoteState::kStopping, now, why);
}

Status Zygote::Started(pid_t pid, UniqueFd channel, const char* how, TimePoint now,
                       const std::string& why) {
  if (started_once_) ++restarts_;
  started_once_ = true;
  pid_ = pid;
  channel_ = std::move(channel);
  started_by_ = how;
  kill_sent_ = false;
  reached_ready_ = false;  // last_exit_ stays: how the previous process ended
  const bool forked = started_by_ == "fork";
  ready_deadline_ = now + (forked ? kZygoteForkReadyTimeout : kZygoteExecReadyTimeout);
  TransitionTo(ZygoteState::kStarting, now, why);
  return Status::Ok();
}

Status Zygote::Exec(const std::string& worker_binary, TimePoint now, const std::string& why) {
  UniqueFd ours, theirs;
  Status s = MakeChannel(&ours, &theirs);
  pid_t pid = -1;
  if (s.ok()) {
    s = LaunchProgram(worker_binary,
                      {ipc::kZygoteProgramName, ipc::kZygoteFlag, std::to_string(kZygoteChannelFd)},
                      {{theirs.get(), kZygoteChannelFd}}, &pid);
  }
  if (!s.ok()) {
    NoteStartFailure(false, now, "exec", s.message());
    return s;
  }
  return Started(pid, std::move(ours), "exec", now, why);
}

Status Zygote::ForkFrom(Zygote& parent, TimePoint now, const std::string& why) {
  UniqueFd ours, theirs;
  Status s = MakeChannel(&ours, &theirs);
  nlohmann::json answer;
  if (s.ok()) {
    ipc::ZygoteLaunch request;
    request.zygote = true;
    request.supervisor = ::getpid();
    s = parent.Exchange(ipc::EncodeZygoteLaunch(request), {theirs.get()}, now, &answer);
  }
  theirs.Reset();  // the new zygote has its copy; a lost one reads end of file from ours and exits
  const pid_t pid = s.ok() && answer.value("type", "") == "launched" ? answer.value("pid", -1) : -1;
  if (pid <= 0) {
    // The parent gone or stuck (its own place judges its exit): try again at once, by the other
    // way if need be. A refused fork or no socket: back off.
    const bool parent_lost = !s.ok() && parent.state() != ZygoteState::kReady;
    const std::string error = s.ok() ? answer.value("error", answer.dump()) : s.message();
    NoteStartFailure(parent_lost, now,
                     std::string("fork from the ") + ZygoteRoleName(parent.role()), error);
    return s.ok() ? Unavailable("zygote: " + error) : s;
  }
  return Started(pid, std::move(ours), "fork", now, why);
}

void Zygote::Poll(TimePoint now) {
  if (state_ == ZygoteState::kStopping && !kill_sent_ && now >= stop_deadline_) {
    Stop(now,
         "still running " + std::to_string(kStopGrace.count()) + " ms after its channel closed");
  }
  if (state_ != ZygoteState::kStarting) return;
  std::string payload;
  std::vector<int> fds;
  Status s = ipc::ReceivePacket(channel_.get(), 0, &payload, &fds);
  for (int fd : fds) ::close(fd);
  if (s.ok() && IsReadyMessage(payload)) {
    backoff_ = kZygoteInitialBackoff;
    reached_ready_ = true;
    TransitionTo(ZygoteState::kReady, now,
                 "can fork (" + started_by_ + ", " +
                     std::to_string(ToMicros(now - state_since_) / 1000) + " ms)");
  } else if (s.code() == StatusCode::kUnavailable) {
    Lose(now, "closed its channel before ready");
  } else if (now >= ready_deadline_) {
    Stop(now, "not ready within " +
                  std::to_string(ToMicros(ready_deadline_ - state_since_) / 1000) + " ms");
  }
}

Status Zygote::Exchange(const std::string& message, const std::vector<int>& fds, TimePoint now,
                        nlohmann::json* answer) {
  if (state_ != ZygoteState::kReady) return Unavailable("zygote not ready");
  Status s = ipc::SendPacket(channel_.get(), message, fds);
  if (!s.ok()) {
    // Nothing went out: no process was forked, the caller may go elsewhere.
    if (s.code() == StatusCode::kUnavailable) {
      Lose(now, "channel closed: " + s.message());
    } else {
      Stop(now, "unreachable: " + s.message());
    }
    return Unavailable(s.message());
  }
  std::string payload;
  std::vector<int> received;
  s = ipc::ReceivePacket(channel_.get(), static_cast<int>(kAnswerTimeout.count()), &payload,
                         &received);
  for (int fd : received) ::close(fd);
  if (!s.ok()) {
    // Gone or stuck after the request went out: a process may have been forked with these
    // descriptors, and a late answer would pair with the next request.
    if (s.code() == StatusCode::kUnavailable) {
      Lose(now, "died mid-request: " + s.message());
    } else {
      Stop(now, "did not answer a request: " + s.message());
    }
    return Status(StatusCode::kDeadlineExceeded,
                  "zygote: no answer to a request, a process may exist: " + s.message());
  }
  *answer = nlohmann::json::parse(payload, nullptr, false);
  if (!answer->is_object()) *answer = nlohmann::json::object({{"error", payload}});
  return Status::Ok();
}

Status Zygote::Launch(const std::vector<std::string>& argv, const std::vector<FdMapping>& fds,
                      const std::vector<std::string>& env, TimePoint now, pid_t* pid) {
  ipc::ZygoteLaunch launch;
  launch.argv = argv;
  launch.env = env;
  launch.supervisor = ::getpid();
  std::vector<int> sources;
  for (const FdMapping& m : fds) {
    sources.push_back(m.source);
    launch.targets.push_back(m.target);
  }
  const std::string message = ipc::EncodeZygoteLaunch(launch);
  if (message.size() > ipc::kZygoteMaxMessageBytes) {
    return Unavailable("zygote: a launch of " + std::to_string(message.size()) +
                       " bytes is over its " + std::to_string(ipc::kZygoteMaxMessageBytes) +
                       "-byte limit");  // this worker execs; the zygote stays
  }
  nlohmann::json answer;
  if (Status s = Exchange(message, sources, now, &answer); !s.ok()) return s;
  if (answer.value("type", "") == "launched") {
    *pid = answer.value("pid", -1);
    if (*pid > 0) {
      ++launches_;
      return Status::Ok();
    }
  }
  // The zygote works but could not fork this one (EAGAIN, threads): the caller may exec.
  return Unavailable("zygote: " + answer.value("error", answer.dump()));
}

bool Zygote::OnExit(pid_t pid, int wait_status, TimePoint now) {
  if (pid <= 0 || pid != pid_) return false;
  // Its ready message may be waiting in the channel still: the SIGCHLD is handled before the
  // loop's zygote duty reads it, and a zygote that was ready is judged as one.
  Poll(now);
  ZygoteExitFacts facts;
  facts.wait_status = wait_status;
  facts.was_ready = reached_ready_;
  facts.killed_by_us = kill_sent_;
  facts.forked = started_by_ == "fork";
  const ZygoteRestart next = DecideZygoteRestart(facts, backoff_, now);
  restart_at_ = next.at;
  backoff_ = next.next_backoff;
  last_exit_ = DescribeWaitStatus(wait_status);
  channel_.Reset();
  TransitionTo(ZygoteState::kDown, now, "exited (" + last_exit_ + "); " + next.why);
  pid_ = -1;
  return true;
}

void Zygote::Stop(TimePoint now, const std::string& why, bool expected) {
  channel_.Reset();  // the zygote reads end of file and exits
  if (pid_ <= 0 || kill_sent_) return;
  ::kill(pid_, SIGKILL);  // reaped through SIGCHLD like any child; OnExit frees the place
  kill_sent_ = true;
  TransitionTo(ZygoteState::kStopping, now, why, expected);
}

TimePoint Zygote::next_deadline() const {
  if (state_ == ZygoteState::kStarting) return ready_deadline_;
  if (state_ == ZygoteState::kStopping && !kill_sent_) return stop_deadline_;
  return TimePoint::max();
}

nlohmann::json Zygote::ToJson(TimePoint now) const {
  return {{"role", ZygoteRoleName(role_)},
          {"state", ZygoteStateName(state_)},
          {"pid", pid_},
          {"started_by", started_by_},
          {"state_for_s", state_since_ == TimePoint{} ? 0.0 : ToMicros(now - state_since_) / 1e6},
          {"launches", launches_},
          {"restarts", restarts_},
          {"last_exit", last_exit_},
          {"next_start_in_s", state_ == ZygoteState::kDown && restart_at_ > now
                                  ? ToMicros(restart_at_ - now) / 1e6
                                  : 0.0}};
}

}  // namespace torchfarm
