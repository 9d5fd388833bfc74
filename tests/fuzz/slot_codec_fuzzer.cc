// libFuzzer entry point over the slot codec's decoders (`make fuzz`; tests/fuzz/README.md).
#include <cstddef>
#include <cstdint>

#include "slot_codec_fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  torchfarm::fuzz::RunSlotCodecInput(data, size);
  return 0;
}
