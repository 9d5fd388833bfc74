// libFuzzer entry point over the JPEG decoder (`make fuzz`; tests/fuzz/README.md).
#include <cstddef>
#include <cstdint>

#include "jpeg_fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  torchfarm::fuzz::RunJpegInput(data, size);
  return 0;
}
