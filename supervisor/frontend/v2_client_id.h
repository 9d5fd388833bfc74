// Client identity of a v2 inference request (docs/kserve-v2.md, "Client identity"): with
// frontend.client_id_header set, the value of that HTTP header or gRPC metadata key names the
// request's client, whose key (frontend_tag.h) is then that value instead of the connection.
//
// Owns: the rule for a value that may name a client (the same bytes a model's client_weights key
// may hold, less what a header cannot carry cleanly) and the refusals that name the header, the
// limit and what was received, never the hostile bytes themselves. Pure; any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/client_weights.h"
#include "common/status.h"
#include "supervisor/intake/request_origin.h"

namespace torchfarm {

// The bytes of one client id: a client_weights key's bound (a ZeroMQ routing id is 1..255 bytes).
inline constexpr size_t kMaxClientIdBytes = kMaxClientKeyBytes;

// OK when `value` of header `header` can name a client: 1..kMaxClientIdBytes bytes, each visible
// ASCII (0x21..0x7e). Else INVALID_ARGUMENT, e.g. "x-tenant: expected 1..255 visible ASCII
// characters naming the client (frontend.client_id_header), got 300 bytes".
Status CheckClientId(std::string_view header, std::string_view value);

// The tag (frontend_tag.h) of a v2 inference request from `peer` into *tag. `header` is
// frontend.client_id_header (empty: off) and `values` the values of that header the request
// carries. None (or the key off): the peer's tag, as without the key. One good value: the
// client id's tag. A bad value, or more than one value (which to believe is not guessed), is
// INVALID_ARGUMENT naming the header.
Status V2RequestTag(RequestOrigin origin, std::string_view peer, std::string_view header,
                    const std::vector<std::string_view>& values, std::string* tag);

}  // namespace torchfarm
