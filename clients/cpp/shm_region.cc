#include "torchfarm/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "torchfarm/client.h"

namespace torchfarm {

namespace {

// shm_create's name must be a single POSIX object name ("/x", no other slash): a reply that
// points anywhere else is refused before anything is opened.
bool IsPlainObjectName(const std::string& name) {
  if (name.size() < 2 || name[0] != '/') return false;
  const std::string rest = name.substr(1);
  return rest.find('/') == std::string::npos && rest != "." && rest != "..";
}

}  // namespace

ShmRegion::ShmRegion(std::string token, std::string name, uint8_t* base, uint64_t size,
                     Client* client)
    : token_(std::move(token)), name_(std::move(name)), base_(base), size_(size), client_(client) {}

ShmRegion::~ShmRegion() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

Status ShmRegion::Map(const std::string& token, const std::string& name, uint64_t bytes,
                      Client* client, std::unique_ptr<ShmRegion>* out) {
  if (!IsPlainObjectName(name)) {
    return Internal("malformed reply: shared-memory name '" + name +
                    "' is not a plain object name (expected \"/name\")");
  }
  if (bytes == 0 || bytes > std::numeric_limits<size_t>::max()) {
    return Internal("malformed reply: shared-memory region " + name + " of " +
                    std::to_string(bytes) + " bytes");
  }
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int error = errno;
    return InvalidArgument("cannot open shared-memory region " + name + " (/dev/shm" + name + ": " +
                           std::strerror(error) +
                           "); shared memory works only on the supervisor's host, for its user "
                           "or its ipc_group");
  }
  struct stat info {};
  Status status;
  void* base = MAP_FAILED;
  if (::fstat(fd, &info) != 0) {
    status = Internal("cannot stat shared-memory region " + name + ": " + std::strerror(errno));
  } else if (static_cast<uint64_t>(info.st_size) < bytes) {
    status = Internal("shared-memory region " + name + " holds " + std::to_string(info.st_size) +
                      " bytes, the supervisor announced " + std::to_string(bytes));
  } else {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      status = InvalidArgument("cannot map shared-memory region " + name + " (" +
                               std::to_string(bytes) + " bytes): " + std::strerror(errno));
    }
  }
  ::close(fd);  // the mapping keeps the memory; the descriptor is no longer needed
  if (!status.ok()) return status;
  out->reset(new ShmRegion(token, name, static_cast<uint8_t*>(base), bytes, client));
  return Status::Ok();
}

Status ShmRegion::CheckRange(uint64_t offset, uint64_t bytes, uint64_t alignment,
                             const std::string& what) const {
  if (alignment > 1 && offset % alignment != 0) {
    return InvalidArgument(what + ": offset " + std::to_string(offset) + " is not a multiple of " +
                           std::to_string(alignment));
  }
  if (offset > size_ || bytes > size_ - offset) {
    return InvalidArgument(what + ": " + std::to_string(bytes) + " bytes at offset " +
                           std::to_string(offset) + " do not fit in region " + name_ + " of " +
                           std::to_string(size_) + " bytes");
  }
  return Status::Ok();
}

Status ShmRegion::Input(const TensorSpec& spec, uint64_t offset, TensorView* out) const {
  auto bytes = ByteSize(spec);
  if (!bytes) {
    return InvalidArgument("ShmRegion::Input: shape " + ShapeToString(spec.shape) +
                           " is negative or too large");
  }
  const std::string what = "ShmRegion::Input " + SpecToString(spec);
  if (Status s = CheckRange(offset, *bytes, DTypeSize(spec.dtype), what); !s.ok()) return s;
  *out = TensorView(spec, ShmRef{token_, offset, 0});
  out->nbytes = static_cast<size_t>(*bytes);
  return Status::Ok();
}

Status ShmRegion::Write(const TensorView& value, uint64_t offset, TensorView* out) {
  if (value.shm.used()) {
    return InvalidArgument("ShmRegion::Write: the value is already in shared memory (region " +
                           value.shm.region + "); pass it as an input as it is");
  }
  auto bytes = ByteSize(value.spec);
  if (!bytes || *bytes != value.nbytes || (value.nbytes > 0 && value.data == nullptr)) {
    return InvalidArgument("ShmRegion::Write: " + SpecToString(value.spec) + " needs " +
                           (bytes ? std::to_string(*bytes) : std::string("too many")) +
                           " bytes of data, got " + std::to_string(value.nbytes) +
                           (value.data == nullptr ? " (data is null)" : ""));
  }
  TensorView input;
  if (Status s = Input(value.spec, offset, &input); !s.ok()) return s;
  if (value.nbytes > 0) std::memcpy(base_ + offset, value.data, value.nbytes);
  *out = std::move(input);
  return Status::Ok();
}

Status ShmRegion::Output(uint64_t offset, uint64_t bytes, ShmRef* out) const {
  Status s = CheckRange(offset, bytes, kShmOutputAlignment, "ShmRegion::Output");
  if (!s.ok()) return s;
  *out = ShmRef{token_, offset, bytes};
  return Status::Ok();
}

Status ShmRegion::Release() {
  if (released_) return Status::Ok();
  released_ = true;
  return client_ != nullptr ? client_->ReleaseShm(token_) : Status::Ok();
}

}  // namespace torchfarm
