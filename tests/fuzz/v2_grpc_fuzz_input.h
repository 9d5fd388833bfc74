// The body of the v2 gRPC request fuzzer, shared by the libFuzzer target (v2_grpc_fuzzer.cc, built
// with clang by `make fuzz`) and by the regression replay (fuzz_regression_test.cc).
//
// Input format: a serialized inference.ModelInferRequest (Triton's grpc_service.proto). Bytes that
// do not parse as one are still given, as text, to the system shared memory parsers: the
// shared-memory parameter parser (supervisor/frontend/v2_shm_parameters.h) when they are a JSON
// object, the register body parser, and the loopback peer check. A parsed request goes through
// the gRPC request conversion (V2RequestFromProto), the shared-memory policy (CheckV2ShmAllowed)
// and ToFarmRequest: a refusal must be INVALID_ARGUMENT with a message; an
// accepted request must carry one frame per input not in shared memory, and a farm header that
// the loop's parser reads back with the same shared-memory references ("shm", "outputs_shm").
#pragma once

#include <cstddef>
#include <cstdint>

namespace torchfarm::fuzz {

void RunV2GrpcInput(const uint8_t* data, size_t size);

}  // namespace torchfarm::fuzz
