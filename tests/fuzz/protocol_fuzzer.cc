// libFuzzer entry point over request intake (`make fuzz`; tests/fuzz/README.md).
#include <cstddef>
#include <cstdint>

#include "protocol_fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  torchfarm::fuzz::RunProtocolInput(data, size);
  return 0;
}
