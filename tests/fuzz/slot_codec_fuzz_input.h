// The body of the slot codec fuzzer, shared by the libFuzzer target (slot_codec_fuzzer.cc, built
// with clang by `make fuzz`) and by the regression replay (fuzz_regression_test.cc).
//
// Input format: the bytes of one ring slot, a SlotHeader and then the data area (a shorter input
// is padded with zeros to a whole header); the buffer is exactly that long, so ASan sees any read
// past it. Every input runs through both decoders of ipc/slot_codec.h:
//   - ReadRequest. When it accepts, every in-slot input is read whole, and the request is written
//     again (WriteRequest, inputs packed anew) and read back: same specs, same bytes, same regions;
//     the inputs as outputs placed and written into a response, which ReadResponse must accept.
//   - ReadResponse, against an expectation taken from the request-only header fields (batch rows
//     from region_count, in place from output_region and its range). When it accepts, every
//     output's rows are read whole.
// Any broken invariant aborts.
#pragma once

#include <cstddef>
#include <cstdint>

namespace torchfarm::fuzz {

void RunSlotCodecInput(const uint8_t* data, size_t size);

}  // namespace torchfarm::fuzz
