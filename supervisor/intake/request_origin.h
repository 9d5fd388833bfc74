// Which front door a request came through: the ZeroMQ job socket, or the HTTP or gRPC front end
// (supervisor/frontend/, through the loop's FrontendHub). Replies go back the same way;
// metrics carry it as the `protocol` label.
#pragma once

#include <cstdint>
#include <string_view>

namespace torchfarm {

enum class RequestOrigin : uint8_t { kZmq = 0, kHttp = 1, kGrpc = 2 };
inline constexpr int kRequestOrigins = 3;

inline std::string_view RequestOriginName(RequestOrigin origin) {
  switch (origin) {
    case RequestOrigin::kHttp: return "http";
    case RequestOrigin::kGrpc: return "grpc";
    default: return "zmq";
  }
}

}  // namespace torchfarm
