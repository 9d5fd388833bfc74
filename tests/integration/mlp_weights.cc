#include "mlp_weights.h"

#include <torch/script.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "farm_fixture.h"

namespace torchfarm::testing {

void WriteMlp(const std::string& path, int seed) {
  const std::string tmp = path + ".tmp";
  const std::string cmd = BinDir() + "/torchfarm-mkmodel --model mlp --seed " +
                          std::to_string(seed) + " --out " + tmp + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::filesystem::rename(tmp, path);
}

std::vector<float> MlpOutput(const std::string& path, const std::vector<float>& x) {
  torch::jit::Module module = torch::jit::load(path);
  module.eval();
  c10::InferenceMode guard;
  std::vector<float> copy = x;
  at::Tensor y = module.forward({torch::from_blob(copy.data(), {1, static_cast<int64_t>(x.size())},
                                                  at::kFloat)})
                     .toTensor()
                     .contiguous();
  return {y.data_ptr<float>(), y.data_ptr<float>() + y.numel()};
}

bool NearFloats(const std::string& bytes, const std::vector<float>& want) {
  if (bytes.size() != want.size() * sizeof(float)) return false;
  const float* got = reinterpret_cast<const float*>(bytes.data());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::abs(got[i] - want[i]) > 1e-4f + 1e-4f * std::abs(want[i])) return false;
  }
  return true;
}

}  // namespace torchfarm::testing
