#include "supervisor/workers/worker_launcher.h"

#include "supervisor/workers/zygote_pool.h"

namespace torchfarm {

Status ProcessWorkerLauncher::Start(const WorkerProcessSpec& spec, TimePoint now,
                                    LaunchedProcess* out) {
  out->pid = -1;
  out->via = "exec";
  Status s = Status::Ok();
  // A launch with its own environment (an MPS client) execs: libraries that read their settings
  // when loaded, and /proc/PID/environ that operators read, see only an exec's.
  if (zygotes_ && spec.env.empty() && zygotes_->Ready()) {
    s = zygotes_->Launch(spec.argv, spec.fds, spec.env, now, &out->pid);
    if (s.ok()) {
      out->via = "zygote";
      return s;
    }
    // Not after a launch whose outcome is unknown: a forked worker may hold these descriptors.
    if (s.code() == StatusCode::kDeadlineExceeded) return s;
  }
  return LaunchProcess(spec.argv, spec.fds, &out->pid, spec.env);
}

}  // namespace torchfarm
