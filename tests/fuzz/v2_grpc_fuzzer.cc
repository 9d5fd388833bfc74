// libFuzzer entry point over the v2 gRPC request conversion and the system shared memory parsers
// (`make fuzz`; tests/fuzz/README.md).
#include <cstddef>
#include <cstdint>

#include "v2_grpc_fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  torchfarm::fuzz::RunV2GrpcInput(data, size);
  return 0;
}
