// The worker's mappings of client shared-memory regions (docs/protocol.md, "Shared-memory
// tensors"), for requests the supervisor hands over in place (ipc/shm_layout.h SlotHeader).
//
// Owns: the mapped regions, keyed by their POSIX name (the supervisor never reuses one), each with
// a count of the batches in flight that point into it. Acquire maps (or finds) a region and counts
// one use; Release ends it. Trim unmaps regions no batch uses whose name is gone (the supervisor
// removes it once the client released the region and no request uses it, so a worker never keeps
// a released region's memory alive), then unused ones beyond `capacity`, least recently used
// first. Runs on the worker's compute thread.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <string>

#include "common/status.h"
#include "ipc/shared_region.h"
#include "ipc/shm_layout.h"

namespace torchfarm::ipc {

class ClientRegionCache {
 public:
  explicit ClientRegionCache(size_t capacity = 8) : capacity_(capacity) {}

  // The mapping of `ref`, opened on first use, with one more use counted. Fails when the name
  // cannot be opened or the region's size differs from ref.bytes.
  Status Acquire(const ClientRegionRef& ref, SharedRegion** out);
  // Ends one use of a region Acquire returned.
  void Release(const SharedRegion* region);
  // Unmaps unused regions whose name is gone, then unused ones beyond capacity; returns how many.
  int Trim();

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::unique_ptr<SharedRegion> region;
    int uses = 0;
  };
  size_t capacity_;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace torchfarm::ipc
