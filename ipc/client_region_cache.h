// The worker's mappings of client shared-memory regions (docs/protocol.md, "Shared-memory
// tensors"), for requests the supervisor hands over in place (ipc/shm_layout.h SlotHeader).
//
// Owns: the mapped regions, keyed by their POSIX name (the supervisor never reuses one). Tensors
// of batches in flight point into them, so nothing is unmapped except in Trim(), which the
// compute loop calls only with no batch in flight: it unmaps regions whose name is gone (the
// supervisor removes it once the client released the region and no request uses it, so a worker
// never keeps a released region's memory alive) and then the least recently used beyond
// `capacity`. Runs on the worker's compute thread.
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

  // The mapping of `ref`, opened on first use. Fails when the name cannot be opened or the
  // region's size differs from ref.bytes.
  Status Get(const ClientRegionRef& ref, SharedRegion** out);
  // Unmaps regions whose name is gone, then the least recently used beyond capacity; returns
  // how many were unmapped. Only while no tensor points into any of them.
  int Trim();

  size_t size() const { return regions_.size(); }

 private:
  size_t capacity_;
  std::list<std::unique_ptr<SharedRegion>> regions_;  // most recently used first
};

}  // namespace torchfarm::ipc
