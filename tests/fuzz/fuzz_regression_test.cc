// Replays every input under the fuzzers' regression folders (inputs that once crashed or broke an
// invariant) and seed corpora through the fuzzers' bodies, in the unit suite, so a fixed bug stays
// fixed without clang or libFuzzer:
//   protocol_fuzzer    tests/fuzz/regressions/, tests/fuzz/corpus/
//   slot_codec_fuzzer  tests/fuzz/slot_codec_regressions/ (when there is one),
//                      tests/fuzz/slot_codec_corpus/
//   v2_http_fuzzer     tests/fuzz/v2_regressions/ (when there is one), tests/fuzz/v2_corpus/
//   jpeg_fuzzer        tests/fuzz/jpeg_regressions/, tests/fuzz/jpeg_corpus/
//   ring_reader_fuzzer tests/fuzz/ring_reader_corpus/
//   v2_grpc_fuzzer     tests/fuzz/v2_grpc_corpus/ (with gRPC)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "jpeg_fuzz_input.h"
#include "protocol_fuzz_input.h"
#include "ring_reader_fuzz_input.h"
#include "slot_codec_fuzz_input.h"
#include "v2_http_fuzz_input.h"
#ifdef TORCHFARM_FUZZ_GRPC
#include "v2_grpc_fuzz_input.h"
#endif

namespace torchfarm::fuzz {
namespace {

namespace fs = std::filesystem;

using FuzzBody = void (*)(const uint8_t* data, size_t size);

int ReplayFolder(const std::string& dir, FuzzBody body) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().filename() == "README.md") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(entry.path().string());
    body(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ++count;
  }
  return count;
}

TEST(FuzzRegressionTest, RegressionsStayFixed) {
  EXPECT_GT(ReplayFolder(TORCHFARM_SOURCE_DIR "/tests/fuzz/regressions", RunProtocolInput), 0);
}

TEST(FuzzRegressionTest, SeedCorpusPasses) {
  EXPECT_GT(ReplayFolder(TORCHFARM_SOURCE_DIR "/tests/fuzz/corpus", RunProtocolInput), 10);
}

TEST(FuzzRegressionTest, SlotCodecRegressionsStayFixed) {
  const std::string dir = TORCHFARM_SOURCE_DIR "/tests/fuzz/slot_codec_regressions";
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no slot codec regressions yet (" << dir << ")";
  ReplayFolder(dir, RunSlotCodecInput);
}

TEST(FuzzRegressionTest, SlotCodecSeedCorpusPasses) {
  EXPECT_GT(ReplayFolder(TORCHFARM_SOURCE_DIR "/tests/fuzz/slot_codec_corpus", RunSlotCodecInput),
            5);
}

TEST(FuzzRegressionTest, RingReaderSeedCorpusPasses) {
  EXPECT_GT(ReplayFolder(TORCHFARM_SOURCE_DIR "/tests/fuzz/ring_reader_corpus", RunRingReaderInput),
            5);
}

TEST(FuzzRegressionTest, V2HttpRegressionsStayFixed) {
  const std::string dir = TORCHFARM_SOURCE_DIR "/tests/fuzz/v2_regressions";
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no v2 HTTP regressions yet (" << dir << ")";
  ReplayFolder(dir, RunV2HttpInput);
}

TEST(FuzzRegressionTest, V2HttpSeedCorpusPasses) {
  EXPECT_GT(ReplayFolder(TORCHFARM_SOURCE_DIR "/tests/fuzz/v2_corpus", RunV2HttpInput), 10);
}

#ifdef TORCHFARM_FUZZ_GRPC
// The gRPC request conversion with Triton's shared-memory parameters, and the extension's text
// parsers (register bodies, parameters, peers), over their seeds.
TEST(FuzzRegressionTest, V2GrpcSeedCorpusPasses) {
  EXPECT_GT(ReplayFolder(TORCHFARM_SOURCE_DIR "/tests/fuzz/v2_grpc_corpus", RunV2GrpcInput), 10);
}
#endif

// Every seed (good JPEGs of every layout, truncated ones, each bad kind) decodes or is refused,
// and after each the reference JPEGs still decode to the same pixels.
TEST(FuzzRegressionTest, JpegSeedCorpusPasses) {
  EXPECT_GT(ReplayFolder(TORCHFARM_SOURCE_DIR "/tests/fuzz/jpeg_corpus", RunJpegInput), 20);
}

TEST(FuzzRegressionTest, JpegRegressionsStayFixed) {
  EXPECT_GT(ReplayFolder(TORCHFARM_SOURCE_DIR "/tests/fuzz/jpeg_regressions", RunJpegInput), 0);
}

}  // namespace
}  // namespace torchfarm::fuzz
