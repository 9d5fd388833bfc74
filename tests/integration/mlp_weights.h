// Test support for model-file rollouts: mlp files with chosen weights, written the way a
// deployment tool does, and their expected outputs computed in the test process (LibTorch).
#pragma once

#include <string>
#include <vector>

namespace torchfarm::testing {

// Writes torchfarm-mkmodel's mlp with weights of `seed` to `path` through a rename in the same
// folder: the path names the new file at once, whole. A failure is a test failure.
void WriteMlp(const std::string& path, int seed);
// The mlp at `path` applied to one row `x` (float32 [1, 256] -> [1, 128]).
std::vector<float> MlpOutput(const std::string& path, const std::vector<float>& x);
// True when `bytes` are float32 values within 1e-4 (absolute plus relative) of `want`.
bool NearFloats(const std::string& bytes, const std::vector<float>& want);

}  // namespace torchfarm::testing
