// The zygote side of ipc/zygote_protocol.h: a torchfarm-worker started with `--zygote FD` (argv[0]
// torchfarm-zygote, so ps tells it from a worker) serves launch and fork_zygote requests until the
// supervisor closes the channel (or dies: PR_SET_PDEATHSIG). A zygote forked by fork_zygote runs
// this same loop, on its own channel, in its own process (supervisor/workers/zygote_pool.h).
//
// Owns nothing LibTorch: by the time main calls RunZygote the process has already paid for
// loading and initialising LibTorch, which is the point. It must stay single-threaded, and never
// touch CUDA or load a model, so that fork gives each worker a clean copy.
// Runs in the zygote process; in a worker child it returns to main.
#pragma once

#include "ipc/zygote_protocol.h"

namespace torchfarm::worker {

// In the zygote (and in each zygote it forks): loops until the channel closes, then returns false
// with *exit_code set. In each worker child: returns true with *launch holding its request, its
// descriptors already at their targets, every other descriptor closed, its environment applied and
// its parent the supervisor; main then runs the worker with launch->argv.
bool RunZygote(int channel, ipc::ZygoteLaunch* launch, int* exit_code);

}  // namespace torchfarm::worker
