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

#include <cstdint>
#include <map>
#include <memory>
#include <string>

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

  ClientShmConfig config_;
  std::string prefix_;
  int group_;
  ShmBudget* budget_ = nullptr;
  std::map<std::string, Entry> regions_;  // by token
  std::map<std::string, int> per_client_;  // live regions of each client that has any
  uint64_t bytes_ = 0;
  uint64_t next_name_ = 0;
  uint64_t created_ = 0;
  uint64_t expired_ = 0;
};

}  // namespace torchfarm
