// How a worker process comes to exist: the one seam between the slot table and the operating
// system. WorkerSlot::Launch prepares everything a worker needs (its shared-memory segment, both
// doorbells, the output pipe, the command line) and hands the result here; the launcher makes the
// process and says which pid it has. Nothing else in the supervisor forks or execs a worker.
//
//   ProcessWorkerLauncher  the farm's: forks from a ready zygote (config worker_launch "zygote",
//                          zygote_pool.h) unless the launch brings its own environment (an MPS
//                          client), else fork+exec of the worker binary (process_launcher.h)
//   a test's fake          starts nothing; keeps the spec so the test can play the worker on the
//                          real segment and doorbells (tests/supervisor/fake_worker.h)
//
// Loop thread only; Start blocks at most one zygote round trip or one fork.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "ipc/control_protocol.h"
#include "supervisor/workers/process_launcher.h"

namespace torchfarm {

class ZygotePool;

// One launch, as the slot prepared it.
struct WorkerProcessSpec {
  ipc::WorkerLaunchArgs args;     // what the worker is told: ids, model, segment name, fds
  std::vector<std::string> argv;  // args.ToArgv(worker binary)
  std::vector<FdMapping> fds;     // the doorbells and the output pipe, as the child sees them
  std::vector<std::string> env;   // added to the child's environment (MPS); non-empty: exec
};

struct LaunchedProcess {
  pid_t pid = -1;
  std::string via = "exec";  // "zygote" or "exec": where the start-up time went (stats)
};

class WorkerLauncher {
 public:
  virtual ~WorkerLauncher() = default;
  // Starts the process. Errors as LaunchProcess (fork, descriptors); DeadlineExceeded when a
  // zygote took the launch and did not answer: a process may exist, so the caller must not try
  // another way with the same descriptors.
  virtual Status Start(const WorkerProcessSpec& spec, TimePoint now, LaunchedProcess* out) = 0;
};

class ProcessWorkerLauncher final : public WorkerLauncher {
 public:
  // `zygotes` null or not ready: every launch execs.
  explicit ProcessWorkerLauncher(ZygotePool* zygotes = nullptr) : zygotes_(zygotes) {}
  Status Start(const WorkerProcessSpec& spec, TimePoint now, LaunchedProcess* out) override;

 private:
  ZygotePool* zygotes_;
};

}  // namespace torchfarm
