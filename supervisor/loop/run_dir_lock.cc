#include "supervisor/loop/run_dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/log.h"

namespace torchfarm {

namespace fs = std::filesystem;

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) {
    ::unlink(path_.c_str());
    ::close(fd_);
  }
}

Status CheckRunDirOwnership(const std::string& run_dir) {
  struct stat st {};
  if (::lstat(run_dir.c_str(), &st) != 0) {
    return Internal("cannot stat run_dir '" + run_dir + "': " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgument("run_dir '" + run_dir + "' is not a directory" +
                           (S_ISLNK(st.st_mode) ? " (a symbolic link; name the real folder)" : ""));
  }
  if (st.st_uid != ::geteuid()) {
    return InvalidArgument("run_dir '" + run_dir + "' is owned by uid " +
                           std::to_string(st.st_uid) + ", not by this user (uid " +
                           std::to_string(::geteuid()) +
                           "); another user may control it: use a run_dir of your own");
  }
  if ((st.st_mode & 022) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return InvalidArgument("run_dir '" + run_dir + "' has mode " + mode +
                           ": group or others may write to it; chmod 700 '" + run_dir +
                           "' or use another run_dir");
  }
  return Status::Ok();
}

Status RunDirLock::Acquire(const std::string& run_dir) {
  std::error_code ec;
  bool created = fs::create_directories(run_dir, ec);
  if (ec) return Internal("cannot create run_dir '" + run_dir + "': " + ec.message());
  if (created && ::chmod(run_dir.c_str(), 0700) != 0) {
    return Internal("cannot chmod 700 run_dir '" + run_dir + "': " + std::strerror(errno));
  }
  if (Status s = CheckRunDirOwnership(run_dir); !s.ok()) return s;
  path_ = run_dir + "/supervisor.pid";
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) {
    return Internal("cannot open '" + path_ + "': " + std::strerror(errno));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {0};
    ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
    std::string owner = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "unknown";
    while (!owner.empty() && (owner.back() == '\n' || owner.back() == ' ')) owner.pop_back();
    ::close(fd_);
    fd_ = -1;
    return Unavailable("run_dir '" + run_dir + "' is owned by a live supervisor (pid " + owner +
                       "); stop it or use another run_dir");
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    return Internal("cannot write '" + path_ + "': " + std::strerror(errno));
  }
  return Status::Ok();
}

namespace {

bool ProcessAlive(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

// "torchfarm-1234-w0.1" -> 1234; "control-1234.sock" -> 1234; 0 if the name has no pid.
pid_t PidIn(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return 0;
  size_t end = prefix.size();
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == prefix.size()) return 0;
  return static_cast<pid_t>(std::stol(name.substr(prefix.size(), end - prefix.size())));
}

}  // namespace

int RemoveStaleFiles(const std::string& run_dir) {
  int removed = 0;
  std::error_code ec;
  auto sweep = [&](const std::string& dir, const std::string& prefix) {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      std::string name = entry.path().filename().string();
      pid_t pid = PidIn(name, prefix);
      if (pid == 0 || pid == ::getpid() || ProcessAlive(pid)) continue;
      if (fs::remove(entry.path(), ec)) {
        ++removed;
        TF_LOG(kInfo) << "removed leftover of a dead supervisor" << Kv("path", entry.path().string())
                      << Kv("dead_pid", pid);
      }
    }
  };
  sweep("/dev/shm", "torchfarm-");
  sweep(run_dir, "control-");
  return removed;
}

}  // namespace torchfarm
