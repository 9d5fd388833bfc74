// Exclusive ownership of a run_dir by one live supervisor.
//
// Owns: <run_dir>/supervisor.pid, held with flock(LOCK_EX) for the supervisor's life, containing
// its pid. A second supervisor on the same run_dir is refused with the owner's pid; a lock left by
// a dead supervisor is free again (the kernel drops flocks with the process), and that supervisor's
// leftovers (its /dev/shm segments and ipc socket files) are removed by RemoveStaleFiles.
#pragma once

#include <string>

#include "common/status.h"

namespace torchfarm {

class RunDirLock {
 public:
  RunDirLock() = default;
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  // Creates run_dir (mode 0700) if needed, checks it (CheckRunDirOwnership) and takes the lock.
  Status Acquire(const std::string& run_dir);

 private:
  int fd_ = -1;
  std::string path_;
};

// Refuses a run_dir that is not a real directory owned by this user, or that group or others may
// write to: whoever controls the folder controls the sockets and the pid file in it.
Status CheckRunDirOwnership(const std::string& run_dir);

// Removes /dev/shm segments "torchfarm-<pid>-…" of supervisors that are no longer alive and
// control sockets in run_dir whose owner is gone. Returns how many were removed.
int RemoveStaleFiles(const std::string& run_dir);

}  // namespace torchfarm
