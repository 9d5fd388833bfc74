// What Client and MultiClient both write and check on the wire, in one place (internal; not
// installed): the memory-safety check of input views, the request header, and reading a reply's
// numeric id.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "torchfarm/client.h"

namespace torchfarm::client_internal {

// Only what protects memory is checked here (a view must cover its spec's bytes); everything else
// is the server's to judge, so its messages stay the single source of truth.
Status CheckInputViews(const std::vector<TensorView>& inputs);

std::string EncodeRequestHeader(uint64_t id, const std::string& model,
                                const std::vector<TensorView>& inputs, const InferOptions& options);

// The id a client assigned (a positive integer); false for anything else.
bool ReplyIdOf(const nlohmann::json& id, uint64_t* out);

}  // namespace torchfarm::client_internal
