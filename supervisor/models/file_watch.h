// Watch mode (config model_repository_poll_s): notices that a file changed by its size and
// modification time, with one stat() per file and poll, so the supervisor can run a full reload
// (which then hashes the files, file_identity.h) only when something did change.
//
// Owns: the last (size, mtime) seen per path. The first scan of a path only remembers it; a path
// that disappears or becomes unreadable counts as a change, as does its return. Runs on the
// supervisor's loop thread (Housekeeping); not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace torchfarm {

class FileWatch {
 public:
  // Stats every path; returns one line per path whose size or mtime changed since the last scan
  // that saw it ("/models/a.pt: size 10 -> 12, mtime changed"). Paths no longer listed are
  // forgotten.
  std::vector<std::string> Scan(const std::vector<std::string>& paths);

 private:
  struct Stamp {
    int64_t size = -1;  // -1: missing or unreadable
    int64_t mtime_ns = 0;
    bool operator==(const Stamp& o) const { return size == o.size && mtime_ns == o.mtime_ns; }
  };
  static Stamp StatFile(const std::string& path);

  std::map<std::string, Stamp> seen_;
};

}  // namespace torchfarm
