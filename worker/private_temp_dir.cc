// Why each check is there: /tmp is shared with every user of the machine. The folder is made with
// mkdir (fails if the name exists: nobody can hand us a symlink or their own folder), checked with
// lstat, and a sweep removes only real folders of this user whose pid no longer exists
// (kill(pid, 0) answers ESRCH); std::filesystem::remove_all does not follow symlinks inside.
#include "worker/private_temp_dir.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

namespace torchfarm::worker {
namespace {

constexpr const char kTempDirPrefix[] = "torchfarm-worker-";

bool OwnedRealDirectory(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid();
}

bool ProcessGone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

int SweepDeadWorkers(const std::string& parent, pid_t self) {
  int swept = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(parent, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const pid_t pid = WorkerPidOfTempDirName(name);
    if (pid <= 0 || pid == self || !ProcessGone(pid)) continue;
    const std::string path = it->path().string();
    if (!OwnedRealDirectory(path)) continue;
    std::error_code remove_error;
    std::filesystem::remove_all(path, remove_error);
    swept += !remove_error;
  }
  return swept;
}

}  // namespace

pid_t WorkerPidOfTempDirName(const std::string& name) {
  const size_t prefix = sizeof(kTempDirPrefix) - 1;
  if (name.size() <= prefix || name.size() > prefix + 9 || name.compare(0, prefix, kTempDirPrefix))
    return -1;
  pid_t pid = 0;
  for (size_t i = prefix; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

Status PrivateTempDir::Create(const std::string& parent_in, pid_t pid, PrivateTempDir* out) {
  std::string parent = parent_in;
  if (parent.empty()) {
    const char* tmpdir = std::getenv("TMPDIR");
    parent = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
  }
  PrivateTempDir dir;
  dir.swept_ = SweepDeadWorkers(parent, pid);
  const std::string path = parent + "/" + kTempDirPrefix + std::to_string(pid);
  if (::mkdir(path.c_str(), 0700) != 0) {
    const int mkdir_errno = errno;  // lstat below may change errno
    if (mkdir_errno != EEXIST || !OwnedRealDirectory(path)) {
      return Internal("worker scratch folder: mkdir '" + path + "' failed: " +
                      std::strerror(mkdir_errno) + " (expected a new folder of this user)");
    }
  }
  dir.path_ = path;
  *out = std::move(dir);
  return Status::Ok();
}

Status PrivateTempDir::Enter(PrivateTempDir* out) {
  Status status = Create("", ::getpid(), out);
  if (!status.ok()) return status;
  ::setenv("TMPDIR", out->path().c_str(), /*overwrite=*/1);
  return Status::Ok();
}

PrivateTempDir::~PrivateTempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

PrivateTempDir::PrivateTempDir(PrivateTempDir&& other) noexcept
    : path_(std::exchange(other.path_, {})), swept_(other.swept_) {}

PrivateTempDir& PrivateTempDir::operator=(PrivateTempDir&& other) noexcept {
  if (this != &other) {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
    path_ = std::exchange(other.path_, {});
    swept_ = other.swept_;
  }
  return *this;
}

}  // namespace torchfarm::worker
