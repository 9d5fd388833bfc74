// The client shared-memory regions of one supervisor (docs/protocol.md, "Shared-memory tensors
// (same host)"): creates them on shm_create, resolves the references requests make to them,
// releases them on shm_release, after idle_timeout_s without use, and all at exit.
//
// Owns: every live region (ipc::SharedRegion) and its token. A region is named
// `<prefix>c<n>-<random>`, where the prefix carries the supervisor's pid so that a crashed
// supervisor's regions are swept at the next start (RunDirLock); the token is a separate 128-bit
// random value, so listing /dev/shm does not reveal it. Requests hold a shared_ptr to the regions
// they use: a released region's token is gone at once, its name and mapping once the last
// request using it is answered.
// Runs on the supervisor's loop thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/config.h"
#include "common/status.h"
#include "ipc/shared_region.h"
#include "supervisor/intake/shm_budget.h"

namespace torchfarm {

struct CreatedRegion {
  std::string token;
  std::string name;  // POSIX shared-memory name, with its leading slash
  uint64_t bytes = 0;
};

// A region registered through Triton's system shared memory extension (status answers).
struct SystemRegionInfo {
  std::string name;
  std::string key;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

// Registered system regions at most (each holds a descriptor and a mapping).
inline constexpr size_t kMaxSystemRegions = 1024;

class ClientShmRegistry {
 public:
  // `group` >= 0: regions are created 0660 and handed to that group (config ipc_group); else 0600.
  ClientShmRegistry(ClientShmConfig config, std::string name_prefix, int group = -1);

  // A region for `client` (what max_regions_per_client counts by:
  // supervisor/intake/client_quota.h).
  Status Create(uint64_t bytes, const std::string& client, TimePoint now, CreatedRegion* out);
  Status Release(const std::string& token);
  // Regions take their bytes from `budget` too (limits.max_shm_bytes); null: no shared cap.
  void set_budget(ShmBudget* budget) { budget_ = budget; }
  // The region `token` names, after checking that [offset, offset + bytes) lies inside it;
  // refreshes its idle time. Errors name `where` (e.g. "inputs[0].shm").
  Status Resolve(const std::string& token, uint64_t offset, uint64_t bytes, const std::string& where,
                 TimePoint now, std::shared_ptr<ipc::SharedRegion>* out);
  // Triton's system shared memory (docs/kserve-v2.md "System shared memory"): a region the
  // client made and registers by `name`, mapped from [offset, offset + byte_size) of the object
  // `key` (system_shm_object.h checks), counted in the budget. A name registered already is
  // refused as Triton refuses it. Separate from the token regions above: a job-socket request
  // never reaches these, a front-end request never reaches the others (ParseJob).
  Status RegisterSystem(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t byte_size);
  // Unregisters `name` (empty: every system region); NOT_FOUND for a name not registered.
  // Requests already accepted keep the mapping until they are answered (shared_ptr), so an
  // unregister never unmaps memory under a running batch.
  Status UnregisterSystem(const std::string& name);
  // Every system region, or only `name` (NOT_FOUND when it is not registered).
  Status SystemStatus(const std::string& name, std::vector<SystemRegionInfo>* out) const;
  // The system region `name`, after checking [offset, offset + bytes) lies inside its
  // registered range; errors name `where`.
  Status ResolveSystem(const std::string& name, uint64_t offset, uint64_t bytes,
                       const std::string& where, std::shared_ptr<ipc::SharedRegion>* out) const;
  size_t system_regions() const { return system_.size(); }
  // For tests: where keys are looked up (default /dev/shm) and the uid they must belong to.
  void set_system_owner(uid_t owner, std::string directory);

  // Releases regions unused for idle_timeout_s; returns how many.
  int ExpireIdle(TimePoint now);
  void ReleaseAll();

  bool enabled() const { return config_.enabled; }
  size_t regions() const { return regions_.size(); }
  uint64_t bytes() const { return bytes_; }
  uint64_t created() const { return created_; }
  uint64_t expired() const { return expired_; }

 private:
  struct Entry {
    std::shared_ptr<ipc::SharedRegion> region;
    TimePoint last_used;
    std::string client;
    ShmBudget::Reservation budget;  // given back when the entry goes
  };
  void Erase(std::map<std::string, Entry>::iterator it);
  struct SystemEntry {
    SystemRegionInfo info;
    std::shared_ptr<ipc::SharedRegion> region;
    ShmBudget::Reservation budget;
  };

  ClientShmConfig config_;
  std::string prefix_;
  int group_;
  ShmBudget* budget_ = nullptr;
  std::map<std::string, Entry> regions_;  // by token
  std::map<std::string, SystemEntry> system_;  // by the client's name for it
  uid_t system_owner_;
  std::string system_directory_;
  std::map<std::string, int> per_client_;  // live regions of each client that has any
  uint64_t bytes_ = 0;
  uint64_t next_name_ = 0;
  uint64_t created_ = 0;
  uint64_t expired_ = 0;
};

}  // namespace torchfarm
