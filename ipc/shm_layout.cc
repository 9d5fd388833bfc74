#include "ipc/shm_layout.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace torchfarm::ipc {

void FillTensorDesc(const TensorSpec& spec, uint64_t offset, uint64_t nbytes, TensorDesc* desc) {
  std::memset(desc, 0, sizeof(*desc));
  desc->dtype = static_cast<uint8_t>(spec.dtype);
  desc->rank = static_cast<uint8_t>(spec.shape.size());
  for (size_t i = 0; i < spec.shape.size() && i < static_cast<size_t>(kMaxRank); ++i) {
    desc->shape[i] = spec.shape[i];
  }
  desc->offset = offset;
  desc->nbytes = nbytes;
}

bool ReadTensorDesc(const TensorDesc& desc, TensorSpec* spec) {
  auto dtype = DTypeFromCode(desc.dtype);
  if (!dtype || desc.rank > kMaxRank) return false;
  spec->dtype = *dtype;
  spec->shape.assign(desc.shape, desc.shape + desc.rank);
  return true;
}

void SetSlotMessage(SlotHeader* header, const std::string& message) {
  size_t n = std::min(message.size(), kSlotMessageBytes - 1);
  std::memcpy(header->message, message.data(), n);
  header->message[n] = '\0';
}

}  // namespace torchfarm::ipc
