#include "supervisor/models/file_watch.h"

#include <sys/stat.h>

namespace torchfarm {

FileWatch::Stamp FileWatch::StatFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Stamp{};
  return Stamp{static_cast<int64_t>(st.st_size),
               static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

namespace {

std::string SizeText(int64_t size) { return size < 0 ? "missing" : std::to_string(size); }

}  // namespace

std::vector<std::string> FileWatch::Scan(const std::vector<std::string>& paths) {
  std::vector<std::string> changed;
  std::map<std::string, Stamp> now;
  for (const std::string& path : paths) {
    if (now.count(path)) continue;
    const Stamp stamp = StatFile(path);
    now[path] = stamp;
    auto before = seen_.find(path);
    if (before == seen_.end() || before->second == stamp) continue;
    std::string line = path + ": size " + SizeText(before->second.size) + " -> " + SizeText(stamp.size);
    if (before->second.mtime_ns != stamp.mtime_ns) line += ", mtime changed";
    changed.push_back(std::move(line));
  }
  seen_ = std::move(now);
  return changed;
}

}  // namespace torchfarm
