// What Client and MultiClient both write and check on the wire, in one place (internal; not
// installed): the memory-safety check of input views, the request header, reading a reply's
// numeric id, and the shared-memory parts (the shm_create answer, outputs placed in a region).
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

// True when a request uses client shared memory (an input in a region, or output_shm).
bool UsesShm(const std::vector<TensorView>& inputs, const InferOptions& options);

// The "shm" object of an ok shm_create reply (`header` is the whole parsed reply header).
Status ReadShmCreated(const nlohmann::json& header, std::string* token, std::string* name,
                      uint64_t* bytes);

// An ok reply to a request with output_shm `range`: no data frames, and every output placed by
// the reply inside the range (region and offsets as ReplyHeader::output_shm reads them).
Status CheckShmOutputs(const ReplyHeader& header, size_t data_frames, const ShmRef& range);

}  // namespace torchfarm::client_internal
