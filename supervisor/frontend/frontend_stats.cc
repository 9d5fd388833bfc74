#include "supervisor/frontend/frontend_stats.h"

#include <algorithm>

namespace torchfarm {

namespace {
constexpr size_t kCodes = 7;  // StatusCode kOk..kInternal
}

const char* FrontendProtocolName(FrontendProtocol protocol) {
  return protocol == FrontendProtocol::kHttp ? "http" : "grpc";
}

void FrontendStats::Record(FrontendProtocol protocol, StatusCode code, int64_t total_us,
                           int64_t farm_us) {
  const size_t p = static_cast<size_t>(protocol);
  const size_t c = std::min(static_cast<size_t>(code), kCodes - 1);
  std::lock_guard<std::mutex> lock(mutex_[p]);
  by_code_[p * kCodes + c]++;
  total_[p].Record(total_us);
  own_[p].Record(std::max<int64_t>(0, total_us - farm_us));
}

nlohmann::json FrontendStats::ToJson() const {
  nlohmann::json out = nlohmann::json::object();
  for (size_t p = 0; p < kProtocols; ++p) {
    std::lock_guard<std::mutex> lock(mutex_[p]);
    uint64_t requests = 0;
    nlohmann::json by_status = nlohmann::json::object();
    for (size_t c = 0; c < kCodes; ++c) {
      const uint64_t n = by_code_[p * kCodes + c];
      requests += n;
      if (n) by_status[std::string(StatusCodeName(static_cast<StatusCode>(c)))] = n;
    }
    out[FrontendProtocolName(static_cast<FrontendProtocol>(p))] = {
        {"requests", requests},
        {"errors", requests - by_code_[p * kCodes]},
        {"by_status", by_status},
        {"total_us", {{"p50", total_[p].Percentile(50)}, {"p99", total_[p].Percentile(99)}}},
        {"frontend_us", {{"p50", own_[p].Percentile(50)}, {"p99", own_[p].Percentile(99)}}}};
  }
  return out;
}

}  // namespace torchfarm
