#include "supervisor/security/descriptor_limit.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <limits>

#include "common/log.h"

namespace torchfarm {

namespace {

int64_t AsInt64(rlim_t value) {
  if (value == RLIM_INFINITY || value > static_cast<rlim_t>(std::numeric_limits<int64_t>::max())) {
    return std::numeric_limits<int64_t>::max();
  }
  return static_cast<int64_t>(value);
}

}  // namespace

DescriptorLimits RaiseDescriptorLimit() {
  DescriptorLimits limits;
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0) return limits;
  limits.soft_was = AsInt64(files.rlim_cur);
  if (files.rlim_cur < files.rlim_max) {
    const rlim_t soft = files.rlim_cur;
    files.rlim_cur = files.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &files) != 0) files.rlim_cur = soft;
  }
  limits.soft = AsInt64(files.rlim_cur);
  limits.hard = AsInt64(files.rlim_max);
  TF_LOG(kInfo) << "descriptor limit" << Kv("soft_was", limits.soft_was) << Kv("soft", limits.soft)
                << Kv("hard", limits.hard);
  return limits;
}

int64_t CurrentDescriptorLimit() {
  rlimit files{};
  return ::getrlimit(RLIMIT_NOFILE, &files) == 0 ? AsInt64(files.rlim_cur) : 0;
}

int64_t DefaultMaxConnections(int64_t descriptor_limit, int64_t workers, const FarmConfig& config) {
  int64_t reserved = kBaseDescriptors + kDescriptorsPerWorker * std::max<int64_t>(0, workers);
  if (config.frontend.enabled()) reserved += config.frontend.max_connections;
  if (config.client_shm.enabled) reserved += config.client_shm.max_regions;
  const int64_t room = descriptor_limit > reserved ? descriptor_limit - reserved : 0;
  return std::clamp(room, kMinDerivedConnections, kMaxJobConnections);
}

int64_t OpenDescriptors() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return -1;
  int64_t count = 0;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count - 1;  // the directory's own descriptor
}

}  // namespace torchfarm
