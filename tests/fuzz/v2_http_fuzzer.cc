// libFuzzer entry point over the v2 HTTP request parser (`make fuzz`; tests/fuzz/README.md).
#include <cstddef>
#include <cstdint>

#include "v2_http_fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  torchfarm::fuzz::RunV2HttpInput(data, size);
  return 0;
}
