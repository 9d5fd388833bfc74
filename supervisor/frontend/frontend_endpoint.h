// What the front ends' threads and the loop agree on besides the hub (loop/frontend_hub.h): the
// tag of a metadata query (farm_channel.h has the message format) and the extensions served.
// Constants only, so the loop's side (events/job_acceptor.h) needs none of the front ends' headers.
#pragma once

namespace torchfarm {

inline constexpr const char* kMetaTag = "meta";

// The Triton extensions both v2 front ends serve (server metadata "extensions", docs/kserve-v2.md);
// HTTP also lists binary_tensor_data.
inline constexpr const char* kV2Extensions[] = {"model_configuration", "statistics",
                                                "model_repository", "classification", "logging"};
// Listed beside them only when frontend.system_shared_memory is on.
inline constexpr const char* kV2SystemShmExtension = "system_shared_memory";

}  // namespace torchfarm
