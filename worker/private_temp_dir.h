// Each worker's own scratch folder, $TMPDIR/torchfarm-worker-<pid> (TMPDIR unset: /tmp), made
// its TMPDIR before the model loads. LibTorch unpacks an AOTInductor package into
// $TMPDIR/aotinductor_XXXXXX and removes it only when the loader is destroyed, so a worker killed
// by SIGKILL (a crash, a hang, a kill storm) used to leave one folder with the package's .so in
// /tmp for every kill. Here the folder carries the worker's pid, and every worker that starts
// removes the folders of workers whose pid is gone, so leftovers never outlive the next start;
// the worker removes its own at a clean exit.
//
// Runs in the worker process, in RunWorker before any thread starts (setenv is not safe beside
// getenv on other threads). Only folders owned by this user, real directories (not symlinks),
// named exactly torchfarm-worker-<digits>, are ever removed; a name taken by someone else leaves
// TMPDIR as it was (the loader's mkdtemp is still safe there) and says why.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace torchfarm::worker {

class PrivateTempDir {
 public:
  // Makes `<parent>/torchfarm-worker-<pid>` (mode 0700) and removes the folders of dead workers
  // beside it. `parent` empty: $TMPDIR, else /tmp. Does not touch the environment.
  static Status Create(const std::string& parent, pid_t pid, PrivateTempDir* out);
  // Create for this process, then TMPDIR = the folder.
  static Status Enter(PrivateTempDir* out);

  PrivateTempDir() = default;
  ~PrivateTempDir();  // removes the folder and what is in it
  PrivateTempDir(PrivateTempDir&& other) noexcept;
  PrivateTempDir& operator=(PrivateTempDir&& other) noexcept;
  PrivateTempDir(const PrivateTempDir&) = delete;
  PrivateTempDir& operator=(const PrivateTempDir&) = delete;

  const std::string& path() const { return path_; }
  // Folders of dead workers removed when this one was made.
  int swept() const { return swept_; }

 private:
  std::string path_;
  int swept_ = 0;
};

// "torchfarm-worker-123" -> 123; -1 for any other name.
pid_t WorkerPidOfTempDirName(const std::string& name);

}  // namespace torchfarm::worker
