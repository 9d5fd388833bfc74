// fork+exec of worker processes (never fork without exec: the child runs no supervisor code
// beyond the async-signal-safe steps below).
//
// In the child, before exec: PR_SET_PDEATHSIG(SIGKILL) so workers die with the supervisor, a check
// that the parent did not already die, an empty signal mask (the supervisor blocks its signals for
// its signalfd), and the inherited fds moved to the numbers the worker's argv names; every other
// fd but stdio is closed, so the child holds exactly 0, 1, 2 and the mapped targets.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace torchfarm {

struct FdMapping {
  int source;  // fd in the supervisor
  int target;  // fd number the child sees
};

// `extra_env` ("NAME=VALUE") replaces or adds to the supervisor's environment in the child.
Status LaunchProcess(const std::vector<std::string>& argv, const std::vector<FdMapping>& fds,
                     pid_t* pid, const std::vector<std::string>& extra_env = {});
// The same, exec'ing `program` with `argv` (whose argv[0], what ps shows, may differ from it).
Status LaunchProgram(const std::string& program, const std::vector<std::string>& argv,
                     const std::vector<FdMapping>& fds, pid_t* pid,
                     const std::vector<std::string>& extra_env = {});

// Exit description for logs: "exit code 3" or "killed by SIGSEGV".
std::string DescribeWaitStatus(int wait_status);

}  // namespace torchfarm
