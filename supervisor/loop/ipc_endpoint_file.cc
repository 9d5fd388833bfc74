#include "supervisor/loop/ipc_endpoint_file.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/unique_fd.h"

namespace torchfarm {

namespace {
int64_t ChangedNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
}
}  // namespace

namespace {
constexpr char kIpcScheme[] = "ipc://";
}  // namespace

std::string IpcEndpointPath(const std::string& endpoint) {
  if (endpoint.rfind(kIpcScheme, 0) != 0) return "";
  std::string path = endpoint.substr(sizeof(kIpcScheme) - 1);
  if (path.empty() || path[0] == '@' || path == "*") return "";
  return path;
}

IpcEndpointFile::IpcEndpointFile(IpcEndpointFile&& other) noexcept
    : path_(std::exchange(other.path_, std::string())),
      device_(other.device_),
      inode_(other.inode_),
      changed_ns_(other.changed_ns_) {}

IpcEndpointFile& IpcEndpointFile::operator=(IpcEndpointFile&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, std::string());
    device_ = other.device_;
    inode_ = other.inode_;
    changed_ns_ = other.changed_ns_;
  }
  return *this;
}

IpcEndpointFile IpcEndpointFile::Bound(const std::string& endpoint) {
  IpcEndpointFile file;
  std::string path = IpcEndpointPath(endpoint);
  struct stat st {};
  // libzmq created the file inside bind(), before it returned.
  if (path.empty() || ::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return file;
  file.path_ = std::move(path);
  file.device_ = st.st_dev;
  file.inode_ = st.st_ino;
  file.changed_ns_ = ChangedNs(st);
  return file;
}

void IpcEndpointFile::Remove() {
  if (path_.empty()) return;
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == device_ && st.st_ino == inode_ &&
      ChangedNs(st) == changed_ns_) {
    ::unlink(path_.c_str());
  }
  path_.clear();
}

Status CheckIpcEndpointFree(const std::string& endpoint) {
  const std::string path = IpcEndpointPath(endpoint);
  struct stat st {};
  if (path.empty() || ::lstat(path.c_str(), &st) != 0) return Status::Ok();
  if (!S_ISSOCK(st.st_mode)) {
    return InvalidArgument("cannot bind '" + endpoint + "': '" + path +
                           "' exists and is not a socket (binding would delete it)");
  }
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) return Status::Ok();  // bind reports it
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return Status::Ok();
  // Non-blocking: a listener whose backlog is full answers EAGAIN instead of stalling the start.
  if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 ||
      errno == EAGAIN) {
    return Unavailable("cannot bind '" + endpoint +
                       "': a live process (another supervisor?) is listening there; stop it or "
                       "choose another endpoint");
  }
  return Status::Ok();  // ECONNREFUSED: a leftover whose owner is gone; bind replaces it
}

}  // namespace torchfarm
