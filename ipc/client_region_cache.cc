#include "ipc/client_region_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace torchfarm::ipc {

Status ClientRegionCache::Get(const ClientRegionRef& ref, SharedRegion** out) {
  const std::string name(ref.name, strnlen(ref.name, sizeof(ref.name)));
  for (auto it = regions_.begin(); it != regions_.end(); ++it) {
    if ((*it)->name() != name) continue;
    regions_.splice(regions_.begin(), regions_, it);
    *out = regions_.front().get();
    return Status::Ok();
  }
  std::unique_ptr<SharedRegion> region;
  if (Status s = SharedRegion::Open(name, &region); !s.ok()) {
    return NotFound("client region: " + s.message());
  }
  if (region->size() != ref.bytes) {
    return Internal("client region '" + name + "' has " + std::to_string(region->size()) +
                    " bytes, the supervisor mapped " + std::to_string(ref.bytes));
  }
  regions_.push_front(std::move(region));
  *out = regions_.front().get();
  return Status::Ok();
}

int ClientRegionCache::Trim() {
  int dropped = 0;
  for (auto it = regions_.begin(); it != regions_.end();) {
    int fd = ::shm_open((*it)->name().c_str(), O_RDONLY, 0);
    if (fd >= 0) ::close(fd);
    if (fd < 0 && errno == ENOENT) {
      it = regions_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  for (; regions_.size() > capacity_; ++dropped) regions_.pop_back();
  return dropped;
}

}  // namespace torchfarm::ipc
