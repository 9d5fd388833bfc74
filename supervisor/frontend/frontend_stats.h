// FrontendStats: what the HTTP and gRPC front ends count about the requests they serve.
//
// Owns: per protocol, requests by outcome and two latency histograms: total (request received by
// the front end -> response written) and the front end's own share (total minus the time the farm
// held the request, i.e. parsing, encoding and thread hand-offs). Written by front-end threads,
// read by the supervisor's loop (stats) and the metrics exporter; a mutex per protocol, held for
// an add.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

#include <nlohmann/json.hpp>

#include "common/latency_histogram.h"
#include "common/status.h"

namespace torchfarm {

enum class FrontendProtocol : int { kHttp = 0, kGrpc = 1 };
const char* FrontendProtocolName(FrontendProtocol protocol);  // "http", "grpc"

class FrontendStats {
 public:
  // One answered request: `code` its outcome; `total_us` received -> written; `farm_us` the time
  // between handing it to the farm and its reply (0 when it never reached the farm).
  void Record(FrontendProtocol protocol, StatusCode code, int64_t total_us, int64_t farm_us);
  // {"http": {"requests": N, "errors": N, "by_status": {...}, "total_us": {p50, p99},
  //           "frontend_us": {p50, p99}}, "grpc": {...}}
  nlohmann::json ToJson() const;

 private:
  struct PerProtocol;
  static constexpr size_t kProtocols = 2;
  mutable std::array<std::mutex, kProtocols> mutex_;
  std::array<uint64_t, kProtocols * 7> by_code_{};  // [protocol * 7 + code]
  std::array<LatencyHistogram, kProtocols> total_{};
  std::array<LatencyHistogram, kProtocols> own_{};
};

}  // namespace torchfarm
