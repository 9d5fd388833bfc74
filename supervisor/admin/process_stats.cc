#include "supervisor/admin/process_stats.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

#include <fstream>
#include <limits>
#include <sstream>
#include <string>

namespace torchfarm {

std::optional<ProcessSample> SampleProcess(pid_t pid, TimePoint now) {
  if (pid <= 0) return std::nullopt;
  const std::string base = "/proc/" + std::to_string(pid);
  ProcessSample sample;
  std::ifstream status(base + "/status");
  bool have_rss = false;
  for (std::string key; status >> key;) {
    uint64_t* field = key == "VmRSS:"    ? &sample.rss_bytes
                      : key == "RssAnon:"  ? &sample.rss_anon_bytes
                      : key == "RssFile:"  ? &sample.rss_file_bytes
                      : key == "RssShmem:" ? &sample.rss_shmem_bytes
                                           : nullptr;
    if (field) {
      uint64_t kib = 0;
      if (status >> kib) *field = kib * 1024;  // "VmRSS:  1234 kB"
      have_rss = have_rss || field == &sample.rss_bytes;
    }
    status.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  if (!have_rss) return std::nullopt;  // gone, or a zombie
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
