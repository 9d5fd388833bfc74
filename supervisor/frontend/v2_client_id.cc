#include "supervisor/frontend/v2_client_id.h"

#include <cstdio>

#include "supervisor/frontend/frontend_tag.h"

namespace torchfarm {

namespace {

std::string Expected(std::string_view header) {
  return std::string(header) + ": expected 1.." + std::to_string(kMaxClientIdBytes) +
         " visible ASCII characters naming the client (frontend.client_id_header), got ";
}

}  // namespace

Status CheckClientId(std::string_view header, std::string_view value) {
  if (value.empty()) return InvalidArgument(Expected(header) + "an empty value");
  if (value.size() > kMaxClientIdBytes) {
    return InvalidArgument(Expected(header) + std::to_string(value.size()) + " bytes");
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const auto byte = static_cast<unsigned char>(value[i]);
    if (byte >= 0x21 && byte <= 0x7e) continue;
    // The byte's code, not the byte: a control character or broken UTF-8 stays out of the reply
    // and the logs.
    char code[8];
    std::snprintf(code, sizeof(code), "0x%02x", byte);
    return InvalidArgument(Expected(header) + std::to_string(value.size()) + " bytes with byte " +
                           code + " at offset " + std::to_string(i));
  }
  return Status::Ok();
}

Status V2RequestTag(RequestOrigin origin, std::string_view peer, std::string_view header,
                    const std::vector<std::string_view>& values, std::string* tag) {
  if (header.empty() || values.empty()) {
    *tag = PeerTag(origin, peer);
    return Status::Ok();
  }
  if (values.size() > 1) {
    return InvalidArgument(std::string(header) +
                           ": expected one value naming the client (frontend.client_id_header), "
                           "got " +
                           std::to_string(values.size()) + " values");
  }
  if (Status s = CheckClientId(header, values[0]); !s.ok()) return s;
  *tag = ClientIdTag(origin, values[0]);
  return Status::Ok();
}

}  // namespace torchfarm
