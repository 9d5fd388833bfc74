// A plain shared-memory region: a named POSIX object mapped read-write, with no layout of its own
// (Boost.Interprocess shared_memory_object + mapped_region). Client regions are these
// (docs/protocol.md, "Shared-memory tensors"): the supervisor creates them, clients and workers
// open them by name.
//
// Owns: the mapping, and for the creator the name. The creator unlinks the name in Unlink() or,
// at the latest, when destroyed; the mapping lives as long as the object, so a region unlinked
// while requests still point into it stays readable for them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

struct stat;

namespace boost::interprocess {
class mapped_region;
class shared_memory_object;
}

namespace torchfarm::ipc {

class SharedRegion {
 public:
  // Creates `name` (failing if it exists) of `bytes` zero-filled bytes with permission `mode`;
  // `group` >= 0 also hands the object to that group.
  static Status Create(const std::string& name, uint64_t bytes, unsigned mode, int group,
                       std::unique_ptr<SharedRegion>* out);
  // Maps an existing object whole.
  static Status Open(const std::string& name, std::unique_ptr<SharedRegion>* out);
  // Maps bytes [offset, offset + bytes) of an existing object (Triton's system shared memory,
  // registered by a client: supervisor/intake/system_shm_object.h); data() is the byte at
  // `offset`, size() is `bytes`, and Covers() counts from `offset`. *identity: the object's
  // fstat, from the descriptor that was mapped. Never unlinks the name.
  static Status OpenRange(const std::string& name, uint64_t offset, uint64_t bytes,
                          struct stat* identity, std::unique_ptr<SharedRegion>* out);

  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  // Removes the name (creator only; idempotent). The mapping stays.
  void Unlink();

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }  // as mapped
  uint64_t base_offset() const { return base_; }  // where data() lies in the object (OpenRange)
  // The object's size now: less than size() when whoever may write it truncated it, and then
  // touching the mapping past that point raises SIGBUS (ipc/guarded_copy.h).
  uint64_t CurrentSize() const;
  // True while [offset, offset + bytes) is still backed by the object.
  bool Covers(uint64_t offset, uint64_t bytes) const;
  const std::string& name() const { return name_; }

 private:
  SharedRegion(std::string name, bool owner,
               std::unique_ptr<boost::interprocess::shared_memory_object> object,
               std::unique_ptr<boost::interprocess::mapped_region> mapping);

  std::string name_;
  bool linked_;  // the creator still has to unlink the name
  std::unique_ptr<boost::interprocess::shared_memory_object> object_;  // its fd, for CurrentSize
  std::unique_ptr<boost::interprocess::mapped_region> mapping_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  uint64_t base_ = 0;
};

}  // namespace torchfarm::ipc
