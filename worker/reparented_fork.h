// How the zygote (worker/zygote.h) starts a process that the supervisor can wait for: fork an
// intermediate, which forks the real child and exits at once, so that the child is re-parented to
// the supervisor (a child subreaper) instead of staying the zygote's. The child then waits until
// the re-parenting has happened before it sets PR_SET_PDEATHSIG, which watches the parent.
//
// Plain POSIX, no LibTorch; runs in the zygote, and its return of 0 in the new child.
#pragma once

#include <sys/types.h>

#include <string>

namespace torchfarm::worker {

// In the calling process: the new child's pid, or -1 with *error set to errno. In the child:
// 0, once its parent is `supervisor`; a child whose parent becomes another process (the
// supervisor died meanwhile) exits with ipc::kExitSupervisorLost instead of returning. A
// non-empty `child_name` is the child's process name (process_title.h) from its first
// instruction on, before the wait (ps, a kill storm's victim list).
pid_t ForkReparentedChild(pid_t supervisor, const std::string& child_name, int* error);

}  // namespace torchfarm::worker
