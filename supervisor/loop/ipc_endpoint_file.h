// The socket file of an ipc:// endpoint, owned by the process that bound it.
//
// libzmq creates the file when a socket binds an ipc:// endpoint (after unlinking whatever was
// there) and leaves it behind when the socket closes, so the supervisor removes it on the way out.
// Only the process that created it may: a supervisor refused at start (its run_dir is locked by a
// live one) or one whose bind failed must not remove a live farm's admin or job socket. So a file
// is recorded only once this process's bind succeeded, with its device and inode, and removed only
// while the path still names that inode (a later bind, by anyone, replaced it otherwise).
//
// Owns: one such path. Runs on the supervisor's loop thread.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace torchfarm {

class IpcEndpointFile {
 public:
  IpcEndpointFile() = default;
  ~IpcEndpointFile() { Remove(); }
  IpcEndpointFile(IpcEndpointFile&& other) noexcept;
  IpcEndpointFile& operator=(IpcEndpointFile&& other) noexcept;
  IpcEndpointFile(const IpcEndpointFile&) = delete;
  IpcEndpointFile& operator=(const IpcEndpointFile&) = delete;

  // Records the file of `endpoint`, to be called right after this process bound it. Other
  // transports (tcp, inproc) and abstract ipc names ("ipc://@name") have no file: the result owns
  // nothing.
  static IpcEndpointFile Bound(const std::string& endpoint);
  // Removes the file now if the path still names the recorded one; then owns nothing.
  void Remove();

  bool owns_file() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  dev_t device_ = 0;
  ino_t inode_ = 0;
  // A file system may give a new file the inode of one just unlinked: the change time tells a
  // later bind's file from ours.
  int64_t changed_ns_ = 0;
};

// The file of an ipc:// endpoint ("ipc:///run/x.sock" -> "/run/x.sock"); empty for other
// transports, abstract names and libzmq's "ipc://*" wildcard.
std::string IpcEndpointPath(const std::string& endpoint);

// To call before binding `endpoint`: libzmq's bind unlinks an existing file and takes the path
// over, even from a live farm listening there. Refuses a path a process still accepts
// connections on, and one that is not a socket (a file of someone's that bind would delete).
// OK for a free path, a stale socket file, and transports without a file.
Status CheckIpcEndpointFree(const std::string& endpoint);

}  // namespace torchfarm
