#include "supervisor/process_stats.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

#include <fstream>
#include <sstream>
#include <string>

namespace torchfarm {

std::optional<ProcessSample> SampleProcess(pid_t pid, TimePoint now) {
  if (pid <= 0) return std::nullopt;
  const std::string base = "/proc/" + std::to_string(pid);
  std::ifstream statm(base + "/statm");
  uint64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return std::nullopt;
  std::ifstream stat(base + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return std::nullopt;
  // Fields after the command name, which is in parentheses and may contain spaces.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  static const long kTicks = ::sysconf(_SC_CLK_TCK);
  static const long kPage = ::sysconf(_SC_PAGESIZE);
  ProcessSample sample;
  sample.rss_bytes = resident_pages * static_cast<uint64_t>(kPage);
  sample.cpu_seconds = static_cast<double>(utime + stime) / static_cast<double>(kTicks);
  sample.taken = now;
  return sample;
}

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
}

double CpuPercent(const ProcessSample& earlier, const ProcessSample& later) {
  double wall = std::chrono::duration<double>(later.taken - earlier.taken).count();
  if (wall <= 0) return 0.0;
  return 100.0 * (later.cpu_seconds - earlier.cpu_seconds) / wall;
}

}  // namespace torchfarm
