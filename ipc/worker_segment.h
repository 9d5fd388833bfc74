// One worker's shared-memory segment (Boost.Interprocess shared_memory_object + mapped_region).
//
// Owns: the mapping, and for the creator (the supervisor) the name: the creator unlinks it when
// destroyed, so no segment outlives the slot that made it. The worker opens the same name, checks
// magic, layout version and geometry, and never unlinks. Segments are created with mode 0600.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "ipc/shm_layout.h"
#include "ipc/spsc_ring.h"

namespace boost::interprocess {
class mapped_region;
}

namespace torchfarm::ipc {

class WorkerSegment {
 public:
  // Creates (replacing any stale segment of the same name) a segment whose slots hold
  // `data_bytes` of tensor data each after their header.
  static Status Create(const std::string& name, uint32_t slot_count, uint64_t data_bytes,
                       std::unique_ptr<WorkerSegment>* out);
  // The bytes Create maps for this geometry (what the supervisor's shm budget counts).
  static uint64_t TotalBytes(uint32_t slot_count, uint64_t data_bytes);
  // Maps an existing segment and validates its header.
  static Status Open(const std::string& name, std::unique_ptr<WorkerSegment>* out);
  // Unlinks a segment by name; true if one existed.
  static bool Remove(const std::string& name);

  ~WorkerSegment();
  WorkerSegment(const WorkerSegment&) = delete;
  WorkerSegment& operator=(const WorkerSegment&) = delete;

  SpscRing request_ring() const { return request_ring_; }
  SpscRing response_ring() const { return response_ring_; }
  const std::string& name() const { return name_; }
  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  uint64_t data_capacity() const { return request_ring_.data_capacity(); }

 private:
  WorkerSegment(std::string name, bool owner, std::unique_ptr<boost::interprocess::mapped_region>);
  void InitRings();

  std::string name_;
  bool owner_;
  std::unique_ptr<boost::interprocess::mapped_region> region_;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  SpscRing request_ring_;
  SpscRing response_ring_;
};

}  // namespace torchfarm::ipc
