// The body of the protocol fuzzer, shared by the libFuzzer target (protocol_fuzzer.cc, built with
// clang by `make fuzz`) and by the regression replay (fuzz_regression_test.cc, in the unit suite
// with any compiler).
//
// Input format: the request's frames separated by kFrameSeparator; the first is the JSON header,
// the others are data frames whose bytes do not matter, only their sizes. Every input runs through
// SplitEnvelope + ParseJob (ParseRequestHeader, CheckInputFrames) under the default limits and
// under tight ones, and through the error reply a refusal produces. Any broken invariant aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace torchfarm::fuzz {

inline constexpr std::string_view kFrameSeparator = "\n--\n";

void RunProtocolInput(const uint8_t* data, size_t size);

}  // namespace torchfarm::fuzz
