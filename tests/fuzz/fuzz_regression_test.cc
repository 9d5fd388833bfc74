// Replays every input under tests/fuzz/regressions/ (inputs that once crashed or broke an
// invariant) and tests/fuzz/corpus/ (the seeds) through the fuzzer's body, in the unit suite, so a
// fixed bug stays fixed without clang or libFuzzer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "protocol_fuzz_input.h"

namespace torchfarm::fuzz {
namespace {

namespace fs = std::filesystem;

int ReplayFolder(const std::string& dir) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().filename() == "README.md") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(entry.path().string());
    RunProtocolInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ++count;
  }
  return count;
}

TEST(FuzzRegressionTest, RegressionsStayFixed) {
  EXPECT_GT(ReplayFolder(TORCHFARM_SOURCE_DIR "/tests/fuzz/regressions"), 0);
}

TEST(FuzzRegressionTest, SeedCorpusPasses) {
  EXPECT_GT(ReplayFolder(TORCHFARM_SOURCE_DIR "/tests/fuzz/corpus"), 10);
}

}  // namespace
}  // namespace torchfarm::fuzz
