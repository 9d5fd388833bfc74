#include "supervisor/zygote.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "ipc/zygote_protocol.h"

namespace torchfarm {

namespace {

constexpr int kZygoteChannelFd = 3;

}  // namespace

Status Zygote::Start(const std::string& worker_binary, Millis wait_ready) {
  // Workers are the zygote's grandchildren; as a subreaper this process inherits them when
  // their parent exits, and sees their SIGCHLD like an exec'd worker's.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return Internal(std::string("prctl(PR_SET_CHILD_SUBREAPER): ") + std::strerror(errno));
  }
  worker_binary_ = worker_binary;
  if (Status s = Spawn(); !s.ok()) return s;
  const TimePoint deadline = Clock::now() + wait_ready;
  while (!Ready() && pid_ > 0 && Clock::now() < deadline) {
    std::string payload;
    std::vector<int> fds;
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
    Status s = ipc::ReceivePacket(channel_.get(), static_cast<int>(std::max<int64_t>(left, 1)),
                                  &payload, &fds);
    for (int fd : fds) ::close(fd);
    if (!s.ok()) break;
    auto j = nlohmann::json::parse(payload, nullptr, false);
    ready_ = j.is_object() && j.value("type", "") == "zygote_ready";
  }
  if (ready_) {
    next_backoff_ = kRestartBackoff;
    ever_ready_ = true;
  }
  if (!ready_) {
    TF_LOG(kWarn) << "worker zygote not ready; workers start by exec until it is"
                  << Kv("pid", pid_) << Kv("waited_ms", wait_ready.count());
  }
  return Status::Ok();
}

Status Zygote::Spawn() {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return Unavailable(std::string("zygote: socketpair: ") + std::strerror(errno));
  }
  UniqueFd ours(pair[0]), theirs(pair[1]);
  pid_t pid = -1;
  Status s = LaunchProcess({worker_binary_, ipc::kZygoteFlag, std::to_string(kZygoteChannelFd)},
                           {{theirs.get(), kZygoteChannelFd}}, &pid);
  if (!s.ok()) return s;
  pid_ = pid;
  channel_ = std::move(ours);
  ready_ = false;
  ever_ready_ = false;
  restart_at_ = TimePoint::max();
  TF_LOG(kInfo) << "worker zygote started" << Kv("pid", pid_);
  return Status::Ok();
}

bool Zygote::Ready() {
  if (ready_ || pid_ <= 0 || !channel_.valid()) return ready_;
  std::string payload;
  std::vector<int> fds;
  if (!ipc::ReceivePacket(channel_.get(), 0, &payload, &fds).ok()) return false;
  for (int fd : fds) ::close(fd);
  auto j = nlohmann::json::parse(payload, nullptr, false);
  ready_ = j.is_object() && j.value("type", "") == "zygote_ready";
  if (ready_) {
    next_backoff_ = kRestartBackoff;
    ever_ready_ = true;
    TF_LOG(kInfo) << "worker zygote ready" << Kv("pid", pid_);
  }
  return ready_;
}

Status Zygote::Launch(const std::vector<std::string>& argv, const std::vector<FdMapping>& fds,
                      const std::vector<std::string>& env, pid_t* pid) {
  if (!Ready()) return Unavailable("zygote not ready");
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
  if (Status s = ipc::SendPacket(channel_.get(), message, sources); !s.ok()) {
    TF_LOG(kWarn) << "worker zygote unreachable; stopping it, workers start by exec meanwhile"
                  << Kv("pid", pid_) << Kv("error", s.message());
    Stop();
    return s;
  }
  std::string payload;
  std::vector<int> received;
  Status s = ipc::ReceivePacket(channel_.get(), static_cast<int>(kAnswerTimeout.count()),
                                &payload, &received);
  for (int fd : received) ::close(fd);
  if (!s.ok()) {
    // Gone or stuck after the request went out: a worker may have been forked with these
    // descriptors, and a late answer would pair with the next launch.
    TF_LOG(kWarn) << "worker zygote did not answer a launch; stopping it, workers start by exec "
                     "meanwhile"
                  << Kv("pid", pid_) << Kv("error", s.message());
    Stop();
    return Status(StatusCode::kDeadlineExceeded,
                  "zygote: no answer to a launch, a worker may exist: " + s.message());
  }
  auto answer = nlohmann::json::parse(payload, nullptr, false);
  if (answer.is_object() && answer.value("type", "") == "launched") {
    *pid = answer.value("pid", -1);
    if (*pid > 0) {
      ++launches_;
      return Status::Ok();
    }
  }
  // The zygote works but could not fork this one (EAGAIN, threads): the caller may exec.
  return Unavailable("zygote: " + (answer.is_object() ? answer.value("error", payload) : payload));
}

bool Zygote::OnExit(pid_t pid, int wait_status, TimePoint now) {
  if (pid <= 0 || pid != pid_) return false;
  const bool was_ready = ever_ready_;
  restart_at_ = now + next_backoff_;
  TF_LOG(kWarn) << "worker zygote exited; starting another after a backoff" << Kv("pid", pid)
                << Kv("cause", DescribeWaitStatus(wait_status))
                << Kv("backoff_ms", next_backoff_.count());
  // One that never got ready is likely to fail again the same way.
  if (!was_ready) next_backoff_ = std::min(next_backoff_ * 2, kMaxRestartBackoff);
  pid_ = -1;
  ready_ = false;
  channel_.Reset();
  return true;
}

void Zygote::Maintain(TimePoint now) {
  if (!enabled() || pid_ > 0 || now < restart_at_) return;
  ++restarts_;
  if (Status s = Spawn(); !s.ok()) {
    TF_LOG(kError) << "cannot start the worker zygote; will retry" << Kv("error", s.message());
    restart_at_ = now + next_backoff_;
    next_backoff_ = std::min(next_backoff_ * 2, kMaxRestartBackoff);
  }
}

void Zygote::Stop() {
  channel_.Reset();  // the zygote reads end-of-file and exits
  ready_ = false;
  if (pid_ > 0) ::kill(pid_, SIGKILL);  // reaped through SIGCHLD like any child
  // OnExit will see this pid and schedule a restart; a stopped zygote keeps that pid until then.
}

}  // namespace torchfarm
