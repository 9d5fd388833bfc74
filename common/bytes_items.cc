#include "common/bytes_items.h"

#include <cstring>

namespace torchfarm {

Status SplitBytesItems(std::string_view buffer, uint64_t expected_items, uint64_t max_item_bytes,
                       const std::string& where, std::vector<std::string_view>* items) {
  items->clear();
  size_t at = 0;
  while (at < buffer.size()) {
    const std::string item_where = where + " item " + std::to_string(items->size());
    if (items->size() >= expected_items) {
      return InvalidArgument(where + ": expected " + std::to_string(expected_items) +
                             " length-prefixed items, the data holds more (" +
                             std::to_string(buffer.size() - at) + " bytes left after item " +
                             std::to_string(expected_items) + ")");
    }
    if (buffer.size() - at < kBytesLengthPrefix) {
      return InvalidArgument(item_where + ": expected a 4-byte length, " +
                             std::to_string(buffer.size() - at) + " bytes are left");
    }
    const auto* p = reinterpret_cast<const uint8_t*>(buffer.data() + at);
    const uint64_t length =
        uint64_t{p[0]} | uint64_t{p[1]} << 8 | uint64_t{p[2]} << 16 | uint64_t{p[3]} << 24;
    at += kBytesLengthPrefix;
    if (length > max_item_bytes) {
      return ResourceExhausted(item_where + ": " + std::to_string(length) +
                               " bytes, over the limit of " + std::to_string(max_item_bytes) +
                               " (limits.max_item_bytes)");
    }
    if (length > buffer.size() - at) {
      return InvalidArgument(item_where + ": its length says " + std::to_string(length) +
                             " bytes, " + std::to_string(buffer.size() - at) + " are left");
    }
    items->emplace_back(buffer.data() + at, static_cast<size_t>(length));
    at += static_cast<size_t>(length);
  }
  if (items->size() != expected_items) {
    return InvalidArgument(where + ": expected " + std::to_string(expected_items) +
                           " length-prefixed items, got " + std::to_string(items->size()));
  }
  return Status::Ok();
}

Status CheckBytesTensor(const TensorSpec& spec, std::string_view buffer, uint64_t max_item_bytes,
                        const std::string& where) {
  if (spec.shape.empty()) {
    return InvalidArgument(where + ": a bytes tensor has rank 1 or more ([N]: N items), got " +
                           SpecToString(spec));
  }
  const std::optional<uint64_t> count = NumElements(spec.shape);
  if (!count)
    return InvalidArgument(where + ": shape " + ShapeToString(spec.shape) + " is invalid");
  std::vector<std::string_view> items;
  return SplitBytesItems(buffer, *count, max_item_bytes, where, &items);
}

void AppendBytesItem(std::string_view item, std::string* out) {
  const auto length = static_cast<uint32_t>(item.size());
  const char prefix[kBytesLengthPrefix] = {
      static_cast<char>(length & 0xff), static_cast<char>((length >> 8) & 0xff),
      static_cast<char>((length >> 16) & 0xff), static_cast<char>((length >> 24) & 0xff)};
  out->append(prefix, kBytesLengthPrefix);
  out->append(item);
}

}  // namespace torchfarm
