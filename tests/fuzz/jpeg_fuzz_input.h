// The body of the JPEG decoder fuzzer, shared by the libFuzzer target (jpeg_fuzzer.cc, built with
// clang by `make fuzz`) and by the regression replay (fuzz_regression_test.cc).
//
// Input format: the bytes of one item of a bytes input, as a client sends it (an encoded image).
// Each input runs through worker/jpeg_decoder.h's DecodeJpegRgb with max_pixels kFuzzMaxPixels:
//   - it answers OK or INVALID_ARGUMENT, nothing else; on failure the pixels are empty;
//   - accepted: 1 <= width, height and width x height <= kFuzzMaxPixels, width x height x 3 bytes;
//     decoded again with max_pixels one less it is refused, with exactly its size it gives the
//     same pixels (the limit is exact, the decode deterministic);
//   - then, on the same thread, fixed good JPEGs (baseline 4:2:0, progressive grayscale) still
//     decode to the very pixels they gave before the first input: a bad item leaves nothing
//     behind (the bug this fuzzer was written for: a handle kept after a failed header answered
//     "two SOI markers" to every later JPEG).
// Any broken invariant aborts.
#pragma once

#include <cstddef>
#include <cstdint>

namespace torchfarm::fuzz {

// 1 Mpx: enough for any layout, small enough that a claimed picture costs milliseconds.
inline constexpr uint64_t kFuzzMaxPixels = uint64_t{1} << 20;

void RunJpegInput(const uint8_t* data, size_t size);

}  // namespace torchfarm::fuzz
