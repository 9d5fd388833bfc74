// The item layout of a bytes tensor (DType::kBytes), as Triton's BYTES: the items one after
// another, each a 4-byte little-endian length followed by that many bytes, nothing between or
// after them. A bytes tensor of shape [N] holds N items; two requests' buffers concatenated are
// the buffer of their rows concatenated, which is how a batch is formed.
//
// Owns: splitting a buffer into items (every length checked against the buffer and against
// max_item_bytes before it is used) and appending items. Used by the supervisor (request checks),
// the worker (reading a request slot back), the clients and the tests; no LibTorch here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/tensor_spec.h"

namespace torchfarm {

inline constexpr size_t kBytesLengthPrefix = 4;  // bytes of each item's length
// The largest item the 4-byte length can describe.
inline constexpr uint64_t kMaxBytesItem = 0xffffffffull;

// Splits `buffer` into its items. Fails (INVALID_ARGUMENT, messages prefixed with `where`) when a
// length runs past the buffer, an item is longer than `max_item_bytes` (RESOURCE_EXHAUSTED,
// naming limits.max_item_bytes), bytes are left over, or the count differs from `expected_items`.
Status SplitBytesItems(std::string_view buffer, uint64_t expected_items, uint64_t max_item_bytes,
                       const std::string& where, std::vector<std::string_view>* items);

// Checks a bytes input's spec and data together: rank 1 or more, and its items (one per element
// of the shape) as SplitBytesItems checks them.
Status CheckBytesTensor(const TensorSpec& spec, std::string_view buffer, uint64_t max_item_bytes,
                        const std::string& where);

// Appends one item (its length, then its bytes) to `out`; the caller keeps items under 4 GiB.
void AppendBytesItem(std::string_view item, std::string* out);

}  // namespace torchfarm
