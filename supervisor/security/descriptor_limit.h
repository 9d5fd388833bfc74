// The supervisor's descriptor table: raising the soft RLIMIT_NOFILE to the hard limit at start,
// the default of max_connections derived from it, and how many descriptors are open now.
//
// Every job connection, HTTP connection, worker (two doorbells, an output pipe, its control
// connection) and client region costs a descriptor; the admin socket must still accept one more
// when the rest are taken (docs/operations.md, "Limits"). Pure functions apart from the
// rlimit and /proc reads; loop thread (and main, before it).
#pragma once

#include <cstdint>

#include "common/config.h"

namespace torchfarm {

struct DescriptorLimits {
  int64_t soft_was = 0;  // before RaiseDescriptorLimit
  int64_t soft = 0;
  int64_t hard = 0;
};

// Raises the soft limit to the hard one (what the administrator allows, e.g. LimitNOFILE= of the
// systemd unit) and returns both; logs them.
DescriptorLimits RaiseDescriptorLimit();
// The soft limit now (0 if it cannot be read; RLIM_INFINITY as INT64_MAX).
int64_t CurrentDescriptorLimit();

// Descriptors each worker holds in the supervisor, with room for one launch in progress.
inline constexpr int64_t kDescriptorsPerWorker = 8;
// Sockets, signalfd, timerfd, lock file, libzmq's own, the metrics exporter, stats' /proc reads,
// and the accept reserve (supervisor/security/accept_guard.h).
inline constexpr int64_t kBaseDescriptors = 96;
// max_connections never derives below this: a tiny limit still serves some clients (the accept
// reserve keeps the admin socket answering either way).
inline constexpr int64_t kMinDerivedConnections = 16;

// max_connections when the config leaves it out: the soft limit less the base,
// kDescriptorsPerWorker per configured worker, the HTTP front end's max_connections (when it is on)
// and one per client region (client_shm.max_regions, when enabled); at least kMinDerivedConnections
// and at most the config's bound.
int64_t DefaultMaxConnections(int64_t descriptor_limit, int64_t workers, const FarmConfig& config);

// Open descriptors of this process (entries of /proc/self/fd), or -1 when they cannot be
// counted (the directory itself needs a descriptor).
int64_t OpenDescriptors();

}  // namespace torchfarm
