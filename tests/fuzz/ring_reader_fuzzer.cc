// libFuzzer entry point over the supervisor's reader of a worker's rings (`make fuzz`;
// tests/fuzz/README.md).
#include <cstddef>
#include <cstdint>

#include "ring_reader_fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  torchfarm::fuzz::RunRingReaderInput(data, size);
  return 0;
}
