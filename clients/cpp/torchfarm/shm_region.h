// A client shared-memory region (docs/protocol.md, "Shared-memory tensors (same host)"): this
// process's read-write mapping of a POSIX shared-memory object that a supervisor created for it
// with shm_create (Client::CreateShm). Only the region's token and offsets cross the socket;
// tensor bytes stay in the region.
//
// Owns: the mapping (unmapped by the destructor). The supervisor owns the object's name and
// unlinks it on release; Release() asks it to (shm_release, through the Client that created the
// region, which must outlive the region). The mapping stays valid after Release(), until the
// region is destroyed, so outputs read from it remain readable. Not thread-safe, like its Client.
//
//   std::unique_ptr<ShmRegion> region;
//   Status s = client.CreateShm(2 << 20, &region);
//   TensorView input;
//   s = region->Write(TensorView{spec, values.data(), bytes}, 0, &input);  // copies into the
//   region InferOptions options; s = region->Output(1 << 20, 1 << 20, &options.output_shm);  //
//   outputs go to [1 MiB, 2 MiB) s = client.Infer("model", {input}, &result, options); const void*
//   out0 = region->data() + result.header.output_shm[0].offset; s = region->Release();
//
// While a request that reads or writes the region is in flight, do not write its input ranges nor
// read its output range (protocol.md, "Rules"). The token is a capability: whoever holds it can
// read and overwrite the region through requests.
//
// Linux: the object is /dev/shm/<name without its slash>. Python client equivalent:
// torchfarm.ShmRegion (region = token(), nbytes = size()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/shm_reference.h"
#include "common/status.h"
#include "common/tensor_spec.h"

namespace torchfarm {

class Client;
struct TensorView;

class ShmRegion {
 public:
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  // Maps the object `name` ("/torchfarm-…", as shm_create returned it) read-write; `bytes` is its
  // size from the same reply. INTERNAL when the name is no plain object name (a malformed reply
  // must not point anywhere else) or the object is smaller than announced; INVALID_ARGUMENT when
  // it cannot be opened here (another host, another user), with the OS's reason. `client` is where
  // Release() sends shm_release (nullptr: Release() only marks the region released).
  static Status Map(const std::string& token, const std::string& name, uint64_t bytes,
                    Client* client, std::unique_ptr<ShmRegion>* out);

  uint8_t* data() { return base_; }
  const uint8_t* data() const { return base_; }
  uint64_t size() const { return size_; }
  // The token that names the region in requests (protocol "region").
  const std::string& token() const { return token_; }
  // The POSIX shared-memory name, with its leading slash.
  const std::string& name() const { return name_; }
  bool released() const { return released_; }

  // An input whose ByteSize(spec) bytes already lie in the region at `offset` (a multiple of the
  // dtype's item size). `*out` has no data: the request names region and offset, no data frame.
  Status Input(const TensorSpec& spec, uint64_t offset, TensorView* out) const;
  // Copies `value`'s bytes into the region at `offset`, then gives the input naming them.
  Status Write(const TensorView& value, uint64_t offset, TensorView* out);
  // The output range [offset, offset + bytes) for InferOptions::output_shm; `offset` a multiple of
  // kShmOutputAlignment (64). Output k lands at the next multiple of 64 after output k-1.
  Status Output(uint64_t offset, uint64_t bytes, ShmRef* out) const;

  // shm_release: the supervisor drops the token at once and unlinks the name once requests using
  // it are answered. A second call does nothing. The mapping stays until destruction. Errors are
  // the supervisor's (NOT_FOUND when it already freed an idle region); the region counts as
  // released either way.
  Status Release();

 private:
  ShmRegion(std::string token, std::string name, uint8_t* base, uint64_t size, Client* client);
  // Fails unless [offset, offset + bytes) lies inside the region and offset % alignment == 0.
  Status CheckRange(uint64_t offset, uint64_t bytes, uint64_t alignment,
                    const std::string& what) const;

  std::string token_;
  std::string name_;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  Client* client_ = nullptr;
  bool released_ = false;
};

}  // namespace torchfarm
