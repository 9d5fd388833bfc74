// Where the front ends' threads meet the loop: the inproc endpoint of the loop's front-end socket
// and the tag of a metadata query (farm_channel.h has the message format). Constants only, so the
// loop's side (events/job_acceptor.h) needs none of the front ends' headers.
#pragma once

namespace torchfarm {

inline constexpr const char* kFrontendEndpoint = "inproc://torchfarm-frontend";
inline constexpr const char* kMetaTag = "meta";

}  // namespace torchfarm
