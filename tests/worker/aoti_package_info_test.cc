// worker/aoti_package_info.h: the metadata of AOTInductor packages as tools/export_model.py writes
// it, hostile values of every key, and the fit checks (device, CPU features, torch release, rows).
#include "worker/aoti_package_info.h"

#include <gtest/gtest.h>

namespace torchfarm::worker {
namespace {

std::unordered_map<std::string, std::string> GoodMetadata() {
  return {{"AOTI_DEVICE_KEY", "cpu"},
          {"AOTI_CPU_ISA", "AVX512 AVX512_VNNI"},
          {"torchfarm_torch_version", "2.15.0"},
          {"torchfarm_batch", "1..256"},
          {"torchfarm_inputs", R"([{"dtype": "float32", "shape": [-1, 256]}])"},
          {"torchfarm_outputs", R"([{"dtype": "float32", "shape": [-1, 128]}])"}};
}

TEST(AotiPackageInfo, ParsesWhatExportModelWrites) {
  AotiPackageInfo info;
  ASSERT_TRUE(ParseAotiPackageInfo(GoodMetadata(), &info).ok());
  EXPECT_EQ(info.device_key, "cpu");
  EXPECT_EQ(info.cpu_isa, (std::vector<std::string>{"AVX512", "AVX512_VNNI"}));
  EXPECT_EQ(info.torch_version, "2.15.0");
  EXPECT_EQ(info.min_rows, 1);
  EXPECT_EQ(info.max_rows, 256);
  EXPECT_FALSE(info.fixed_batch());
  ASSERT_EQ(info.inputs.size(), 1u);
  EXPECT_EQ(info.inputs[0].shape, (std::vector<int64_t>{-1, 256}));
  ASSERT_EQ(info.outputs.size(), 1u);
  EXPECT_EQ(info.outputs[0].shape, (std::vector<int64_t>{-1, 128}));
  EXPECT_EQ(info.BatchText(), "1..256");
}

TEST(AotiPackageInfo, PackageWithoutTorchfarmKeysRecordsNothing) {
  AotiPackageInfo info;
  ASSERT_TRUE(ParseAotiPackageInfo({{"AOTI_DEVICE_KEY", "cpu"}}, &info).ok());
  EXPECT_EQ(info.max_rows, 0);
  EXPECT_TRUE(info.torch_version.empty());
  EXPECT_EQ(info.BatchText(), "not recorded");
  EXPECT_TRUE(CheckAotiRows(info, 12345).ok());
}

TEST(AotiPackageInfo, HostileBatchValuesAreRefusedWithWhatWasReceived) {
  for (const std::string bad : {"", "0", "-3", "a..b", "5..2", "1..", "..4", "1...4", "1..2..3",
                                "99999999999999999", "4 ", "0x10"}) {
    auto metadata = GoodMetadata();
    metadata["torchfarm_batch"] = bad;
    AotiPackageInfo info;
    Status status = ParseAotiPackageInfo(metadata, &info);
    ASSERT_FALSE(status.ok()) << "'" << bad << "'";
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("torchfarm_batch: expected"), std::string::npos);
    EXPECT_NE(status.message().find("got '" + bad + "'"), std::string::npos) << status.message();
  }
}

TEST(AotiPackageInfo, HostileSpecsAreRefused) {
  for (const std::string bad :
       {"", "{", "{}", "[1]", R"([{"dtype": "float32"}])", R"([{"shape": [1]}])",
        R"([{"dtype": "complex128", "shape": [1]}])", R"([{"dtype": "float32", "shape": [-2]}])",
        R"([{"dtype": "float32", "shape": [1.5]}])",
        R"([{"dtype": "float32", "shape": [1,1,1,1,1,1,1,1,1]}])",
        R"([{"dtype": 7, "shape": [1]}])"}) {
    auto metadata = GoodMetadata();
    metadata["torchfarm_inputs"] = bad;
    AotiPackageInfo info;
    Status status = ParseAotiPackageInfo(metadata, &info);
    ASSERT_FALSE(status.ok()) << bad;
    EXPECT_EQ(status.message().rfind("torchfarm_inputs", 0), 0u) << status.message();
  }
}

TEST(AotiPackageInfo, HostileTorchVersionIsRefused) {
  for (const std::string bad : {"", "two", "2", "-1.3"}) {
    auto metadata = GoodMetadata();
    metadata["torchfarm_torch_version"] = bad;
    AotiPackageInfo info;
    Status status = ParseAotiPackageInfo(metadata, &info);
    ASSERT_FALSE(status.ok()) << bad;
    EXPECT_NE(status.message().find("got '" + bad + "'"), std::string::npos);
  }
}

TEST(AotiPackageInfo, FitsThisDeviceCpuAndTorch) {
  AotiPackageInfo info;
  ASSERT_TRUE(ParseAotiPackageInfo(GoodMetadata(), &info).ok());
  const std::set<std::string> flags = {"sse2", "avx2", "avx512f", "avx512_vnni"};
  EXPECT_TRUE(CheckAotiPackageFits(info, "cpu", flags, 2, 15).ok());

  Status device = CheckAotiPackageFits(info, "cuda", flags, 2, 15);
  ASSERT_FALSE(device.ok());
  EXPECT_NE(device.message().find("compiled for device 'cpu'"), std::string::npos);
  EXPECT_NE(device.message().find("runs on 'cuda'"), std::string::npos);

  Status cpu = CheckAotiPackageFits(info, "cpu", {"sse2", "avx2"}, 2, 15);
  ASSERT_FALSE(cpu.ok());
  EXPECT_NE(cpu.message().find("AVX512 AVX512_VNNI, which this CPU lacks"), std::string::npos)
      << cpu.message();

  Status torch = CheckAotiPackageFits(info, "cpu", flags, 2, 14);
  ASSERT_FALSE(torch.ok());
  EXPECT_NE(torch.message().find("compiled by torch 2.15.0"), std::string::npos);
  EXPECT_NE(torch.message().find("runs LibTorch 2.14"), std::string::npos);
}

TEST(AotiPackageInfo, FixedBatchTakesThatBatchOnly) {
  auto metadata = GoodMetadata();
  metadata["torchfarm_batch"] = "4";
  AotiPackageInfo info;
  ASSERT_TRUE(ParseAotiPackageInfo(metadata, &info).ok());
  EXPECT_TRUE(info.fixed_batch());
  EXPECT_EQ(info.BatchText(), "4 only");
  EXPECT_TRUE(CheckAotiRows(info, 4).ok());
  Status three = CheckAotiRows(info, 3);
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(three.message().find("fixed batch of 4 rows"), std::string::npos);
  EXPECT_NE(three.message().find("got 3 rows"), std::string::npos);
}

TEST(AotiPackageInfo, DynamicRangeRefusesRowsOutsideIt) {
  AotiPackageInfo info;
  ASSERT_TRUE(ParseAotiPackageInfo(GoodMetadata(), &info).ok());
  EXPECT_TRUE(CheckAotiRows(info, 1).ok());
  EXPECT_TRUE(CheckAotiRows(info, 256).ok());
  Status big = CheckAotiRows(info, 257);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.message().find("takes 1..256 rows"), std::string::npos);
}

// A range from 2 (export_model.py's transformer): 1 row runs padded to 2; a fixed batch never pads.
TEST(AotiPackageInfo, RowsBelowADynamicRangeArePaddedFixedBatchesAreNot) {
  auto metadata = GoodMetadata();
  metadata["torchfarm_batch"] = "2..256";
  AotiPackageInfo info;
  ASSERT_TRUE(ParseAotiPackageInfo(metadata, &info).ok());
  EXPECT_TRUE(CheckAotiRows(info, 1).ok());
  EXPECT_EQ(AotiRunRows(info, 1), 2);
  EXPECT_EQ(AotiRunRows(info, 2), 2);
  EXPECT_EQ(AotiRunRows(info, 200), 200);
  EXPECT_FALSE(CheckAotiRows(info, 257).ok());
  metadata["torchfarm_batch"] = "4";
  ASSERT_TRUE(ParseAotiPackageInfo(metadata, &info).ok());
  EXPECT_EQ(AotiRunRows(info, 3), 3);
  EXPECT_FALSE(CheckAotiRows(info, 3).ok());
}

TEST(AotiPackageInfo, CpuFlagsFromCpuinfo) {
  const std::string cpuinfo =
      "processor\t: 0\nmodel name\t: X\nflags\t\t: fpu sse2 avx2 avx512f amx_tile\n\n"
      "processor\t: 1\nflags\t\t: other\n";
  const std::set<std::string> flags = ParseCpuFlags(cpuinfo);
  EXPECT_EQ(flags.count("avx512f"), 1u);
  EXPECT_EQ(flags.count("amx_tile"), 1u);
  EXPECT_EQ(flags.count("other"), 0u);
  EXPECT_EQ(CpuFlagOfIsa("AVX512"), "avx512f");
  EXPECT_EQ(CpuFlagOfIsa("AMX_TILE"), "amx_tile");
  EXPECT_TRUE(ParseCpuFlags("garbage without flags").empty());
}

// The metadata is the package's to choose: nesting deep enough to overflow a recursive dump() of
// it is refused with its type, in either place a spec can hold it.
TEST(AotiPackageInfo, DeeplyNestedSpecsAreRefusedWithoutRecursion) {
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  for (const std::string& bad :
       {"[" + deep + "]", R"([{"dtype": "float32", "shape": [-1, )" + deep + "]}]"}) {
    auto metadata = GoodMetadata();
    metadata["torchfarm_inputs"] = bad;
    AotiPackageInfo info;
    Status status = ParseAotiPackageInfo(metadata, &info);
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("got array"), std::string::npos) << status.message();
  }
  AotiPackageInfo info;
  EXPECT_TRUE(ParseAotiPackageInfo(GoodMetadata(), &info).ok()) << "the next good one still parses";
}

TEST(AotiPackageInfo, InputsAreHeldToTheRecordedDtypeAndShape) {
  AotiPackageInfo info;
  ASSERT_TRUE(ParseAotiPackageInfo(GoodMetadata(), &info).ok());
  EXPECT_TRUE(CheckAotiInput(info, 0, DType::kFloat32, {3, 256}).ok());
  EXPECT_TRUE(CheckAotiInput(info, 0, DType::kFloat32, {256, 256}).ok()) << "-1: any batch";
  Status narrow = CheckAotiInput(info, 0, DType::kFloat32, {3, 10});
  EXPECT_EQ(narrow.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(narrow.message().find("compiled for shape [-1, 256] (-1: any), got [3, 10]"),
            std::string::npos)
      << narrow.message();
  Status rank = CheckAotiInput(info, 0, DType::kFloat32, {3, 256, 1});
  EXPECT_EQ(rank.code(), StatusCode::kInvalidArgument);
  Status dtype = CheckAotiInput(info, 0, DType::kInt64, {3, 256});
  EXPECT_EQ(dtype.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dtype.message().find("compiled for float32, got int64"), std::string::npos)
      << dtype.message();
  AotiPackageInfo bare;  // no torchfarm_inputs: the package's own checks decide
  EXPECT_TRUE(CheckAotiInput(bare, 0, DType::kInt64, {3, 10}).ok());
}

}  // namespace
}  // namespace torchfarm::worker
