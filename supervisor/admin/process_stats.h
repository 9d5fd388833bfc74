// Resource use of a child process read from /proc: resident memory and CPU time, and the CPU
// percentage between two samples. Owns nothing; loop thread only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "common/clock.h"

namespace torchfarm {

struct ProcessSample {
  uint64_t rss_bytes = 0;
  // The parts of rss_bytes (/proc/PID/status): private anonymous memory (heap, stacks, the
  // process's own), file pages (binaries, libraries) and shared memory (the worker segments as
  // far as this process touched them; the same pages count in the worker's RSS too).
  uint64_t rss_anon_bytes = 0;
  uint64_t rss_file_bytes = 0;
  uint64_t rss_shmem_bytes = 0;
  double cpu_seconds = 0;  // user + system
  TimePoint taken{};
};

// nullopt when the process is gone.
std::optional<ProcessSample> SampleProcess(pid_t pid, TimePoint now);
// CPUs this process may run on (its affinity mask).
int AvailableCores();
// 100 = one core fully busy between the samples.
double CpuPercent(const ProcessSample& earlier, const ProcessSample& later);

}  // namespace torchfarm
