// Random request inputs for `torchfarm bench`, distinct per request and cheap to make.
//
// Owns: one read-only pool of random values per input, a little longer than the input. A request
// gets a window of the pool at a random element offset, and its first element is stamped with a
// per-request counter, so no two requests of a run carry the same bytes while making one costs a
// single memcpy. Values are valid for the dtype: floats uniform in [-1, 1), integers random,
// bools 0/1. Built once on the CLI's main thread; Fill() is const and safe from any thread.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/tensor_spec.h"

namespace torchfarm {

class InputPool {
 public:
  InputPool(const std::vector<TensorSpec>& inputs, uint64_t seed);

  // Writes input `index` (ByteSize(spec) bytes) to `out`. `counter` distinguishes the request.
  void Fill(size_t index, uint64_t counter, std::mt19937_64& rng, uint8_t* out) const;

  size_t input_count() const { return specs_.size(); }
  uint64_t input_bytes(size_t index) const { return bytes_[index]; }

 private:
  std::vector<TensorSpec> specs_;
  std::vector<uint64_t> bytes_;
  std::vector<std::string> pools_;
};

}  // namespace torchfarm
