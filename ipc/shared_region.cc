#include "ipc/shared_region.h"

#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>

namespace torchfarm::ipc {

namespace bip = boost::interprocess;

SharedRegion::SharedRegion(std::string name, bool owner,
                           std::unique_ptr<bip::shared_memory_object> object,
                           std::unique_ptr<bip::mapped_region> mapping)
    : name_(std::move(name)),
      linked_(owner),
      object_(std::move(object)),
      mapping_(std::move(mapping)) {
  data_ = static_cast<uint8_t*>(mapping_->get_address());
  size_ = mapping_->get_size();
}

SharedRegion::~SharedRegion() {
  mapping_.reset();
  object_.reset();
  Unlink();
}

uint64_t SharedRegion::CurrentSize() const {
  struct stat st {};
  if (::fstat(object_->get_mapping_handle().handle, &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

bool SharedRegion::Covers(uint64_t offset, uint64_t bytes) const {
  const uint64_t object = CurrentSize();
  const uint64_t now = object > base_ ? std::min(object - base_, size_) : 0;
  return offset <= now && bytes <= now - offset;
}

void SharedRegion::Unlink() {
  if (!linked_) return;
  linked_ = false;
  bip::shared_memory_object::remove(name_.c_str());
}

Status SharedRegion::Create(const std::string& name, uint64_t bytes, unsigned mode, int group,
                            std::unique_ptr<SharedRegion>* out) {
  auto shm = std::make_unique<bip::shared_memory_object>();
  try {
    *shm = bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write,
                                     bip::permissions(mode));
  } catch (const bip::interprocess_exception& e) {
    // Someone else's object (or no room): not ours to remove.
    return ResourceExhausted("cannot create shared-memory object '" + name + "' of " +
                             std::to_string(bytes) + " bytes: " + e.what());
  }
  try {
    const int fd = shm->get_mapping_handle().handle;
    // The umask may have narrowed the mode; the object's mode is what the caller asked for.
    if (::fchmod(fd, mode) != 0 ||
        (group >= 0 && ::fchown(fd, static_cast<uid_t>(-1), static_cast<gid_t>(group)) != 0)) {
      int error = errno;
      bip::shared_memory_object::remove(name.c_str());
      return Internal("cannot set the mode or group of shared-memory object '" + name +
                      "': " + std::strerror(error));
    }
    shm->truncate(static_cast<bip::offset_t>(bytes));
    auto mapping = std::make_unique<bip::mapped_region>(*shm, bip::read_write);
    out->reset(new SharedRegion(name, true, std::move(shm), std::move(mapping)));
    return Status::Ok();
  } catch (const bip::interprocess_exception& e) {
    bip::shared_memory_object::remove(name.c_str());
    return ResourceExhausted("cannot create shared-memory object '" + name + "' of " +
                             std::to_string(bytes) + " bytes: " + e.what());
  }
}

Status SharedRegion::Open(const std::string& name, std::unique_ptr<SharedRegion>* out) {
  try {
    auto shm = std::make_unique<bip::shared_memory_object>(bip::open_only, name.c_str(),
                                                           bip::read_write);
    auto mapping = std::make_unique<bip::mapped_region>(*shm, bip::read_write);
    out->reset(new SharedRegion(name, false, std::move(shm), std::move(mapping)));
    return Status::Ok();
  } catch (const bip::interprocess_exception& e) {
    return NotFound("cannot open shared-memory object '" + name + "': " + e.what());
  }
}

Status SharedRegion::OpenRange(const std::string& name, uint64_t offset, uint64_t bytes,
                               struct stat* identity, std::unique_ptr<SharedRegion>* out) {
  try {
    auto shm =
        std::make_unique<bip::shared_memory_object>(bip::open_only, name.c_str(), bip::read_write);
    if (::fstat(shm->get_mapping_handle().handle, identity) != 0) {
      return Internal("cannot fstat shared-memory object '" + name + "': " + std::strerror(errno));
    }
    // A range past the object's end would map pages that SIGBUS when touched: the caller checks
    // the size from *identity, but only after this returns, so check here too.
    const auto size = static_cast<uint64_t>(identity->st_size);
    if (bytes == 0 || offset > size || bytes > size - offset) {
      return InvalidArgument("shared-memory object '" + name + "' has " + std::to_string(size) +
                             " bytes; bytes [" + std::to_string(offset) + ", " +
                             std::to_string(offset) + " + " + std::to_string(bytes) +
                             ") are not inside it");
    }
    auto mapping = std::make_unique<bip::mapped_region>(
        *shm, bip::read_write, static_cast<bip::offset_t>(offset), static_cast<size_t>(bytes));
    out->reset(new SharedRegion(name, false, std::move(shm), std::move(mapping)));
    (*out)->base_ = offset;
    return Status::Ok();
  } catch (const bip::interprocess_exception& e) {
    return NotFound("cannot open shared-memory object '" + name + "': " + e.what());
  }
}

}  // namespace torchfarm::ipc
