// The shared memory of `torchfarm bench --shm` (docs/protocol.md, "Shared-memory tensors (same
// host)"): one region per generator client, cut into `depth` areas, one per request the client
// keeps in flight. An area holds the request's inputs, each at a multiple of 64 bytes, then its
// output range. Requests name their area by offsets only; tensor bytes never cross the socket.
//
// Owns: a Client (the control connection that creates and releases the regions; a region is no
// one socket's, so the generator's own DEALER sockets use them freely), the regions' mappings, and
// one request header template per area. Built on the CLI thread before the generator threads
// start; afterwards the threads only read templates and write their own clients' areas.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/tensor_spec.h"
#include "tools/bench_protocol.h"
#include "torchfarm/client.h"

namespace torchfarm {

class BenchShmRegions {
 public:
  // `output_bytes`: each area's output range (0: the inputs' own placed size, which fits a model
  // whose outputs are shaped like its inputs, e.g. identity).
  BenchShmRegions(std::string endpoint, std::string model, std::vector<TensorSpec> inputs,
                  int depth, uint64_t output_bytes, int io_timeout_ms);
  ~BenchShmRegions();  // releases what Release() did not
  BenchShmRegions(const BenchShmRegions&) = delete;
  BenchShmRegions& operator=(const BenchShmRegions&) = delete;

  // One region of region_bytes() per client. On failure nothing stays created, and the message
  // says which region failed and why (e.g. the endpoint is on another host).
  Status Create(int clients);
  // shm_release of every region; the first error, if any (all are attempted).
  Status Release();

  uint64_t region_bytes() const { return areas_ * area_bytes_; }
  int areas() const { return areas_; }
  // Where input `input` of area `area` of client `client` lies in this process.
  uint8_t* InputAt(size_t client, int area, size_t input) const;
  const RequestTemplate& Template(size_t client, int area) const;
  // True when an ok reply header places every output in that area's output range; `*bytes`: the
  // outputs' total size.
  bool OutputsInArea(std::string_view header, size_t client, int area, uint64_t* bytes) const;

 private:
  ShmRef OutputRange(size_t client, int area) const;

  std::string endpoint_;
  std::string model_;
  std::vector<TensorSpec> inputs_;
  int areas_;
  int io_timeout_ms_;
  std::vector<uint64_t> input_offsets_;  // inside an area
  uint64_t output_offset_ = 0;           // inside an area, a multiple of 64
  uint64_t output_bytes_ = 0;
  uint64_t area_bytes_ = 0;  // a multiple of 64
  // The client before its regions: they release through it.
  std::unique_ptr<Client> client_;
  std::vector<std::unique_ptr<ShmRegion>> regions_;      // per generator client
  std::vector<std::vector<RequestTemplate>> templates_;  // [client][area]
};

}  // namespace torchfarm
