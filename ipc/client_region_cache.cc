#include "ipc/client_region_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace torchfarm::ipc {

Status ClientRegionCache::Acquire(const ClientRegionRef& ref, SharedRegion** out) {
  const std::string name(ref.name, strnlen(ref.name, sizeof(ref.name)));
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->region->name() != name) continue;
    entries_.splice(entries_.begin(), entries_, it);
    ++entries_.front().uses;
    *out = entries_.front().region.get();
    return Status::Ok();
  }
  std::unique_ptr<SharedRegion> region;
  if (Status s = SharedRegion::Open(name, &region); !s.ok()) {
    return NotFound("client region: " + s.message());
  }
  if (region->size() != ref.bytes) {
    // Its client resized it after registering: that request's problem alone.
    return InvalidArgument("client region '" + name + "' has " + std::to_string(region->size()) +
                           " bytes, the supervisor mapped " + std::to_string(ref.bytes) +
                           " (was it truncated?)");
  }
  entries_.push_front(Entry{std::move(region), 1});
  *out = entries_.front().region.get();
  return Status::Ok();
}

void ClientRegionCache::Release(const SharedRegion* region) {
  for (Entry& entry : entries_) {
    if (entry.region.get() == region && entry.uses > 0) {
      --entry.uses;
      return;
    }
  }
}

int ClientRegionCache::Trim() {
  int dropped = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    bool gone = false;
    if (it->uses == 0) {
      int fd = ::shm_open(it->region->name().c_str(), O_RDONLY, 0);
      gone = fd < 0 && errno == ENOENT;
      if (fd >= 0) ::close(fd);
    }
    if (gone) {
      it = entries_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  // Beyond capacity: the least recently used that no batch uses.
  for (auto it = entries_.end(); entries_.size() > capacity_ && it != entries_.begin();) {
    --it;
    if (it->uses == 0) {
      it = entries_.erase(it);
      ++dropped;
    }
  }
  return dropped;
}

}  // namespace torchfarm::ipc
