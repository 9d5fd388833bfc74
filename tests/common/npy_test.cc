#include "common/npy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace torchfarm {
namespace {

using ::testing::HasSubstr;

constexpr const char* kPython = "/usr/bin/python3";

std::string TempPath(const std::string& name) {
  std::string dir = ::testing::TempDir();
  if (!dir.empty() && dir.back() != '/') dir += '/';
  return dir + "torchfarm_npy_test_" + std::to_string(getpid()) + "_" + name;
}

std::string Pattern(size_t nbytes) {
  std::string data(nbytes, '\0');
  for (size_t i = 0; i < nbytes; ++i) data[i] = static_cast<char>((i * 37 + 11) & 0xff);
  return data;
}

// A hand-built .npy: magic, version, little-endian header length, `dict` padded to 64 bytes.
std::string BuildNpy(const std::string& dict, const std::string& data, int major = 1) {
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  size_t width = major == 1 ? 2 : 4;
  std::string header = dict;
  while ((8 + width + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  for (size_t i = 0; i < width; ++i)
    out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return out + header + data;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

TEST(NpyTest, RoundTripEveryDtypeThroughFiles) {
  for (int code = 1; code < 256; ++code) {
    auto dtype = DTypeFromCode(static_cast<uint8_t>(code));
    // No .npy form: bfloat16 (numpy lacks it) and bytes (items of any length).
    if (!dtype || *dtype == DType::kBFloat16 || *dtype == DType::kBytes) continue;
    SCOPED_TRACE(std::string(DTypeName(*dtype)));
    TensorSpec spec{*dtype, {2, 3, 4}};
    std::string data = Pattern(*ByteSize(spec));
    std::string path = TempPath(std::string(DTypeName(*dtype)) + ".npy");
    ASSERT_TRUE(WriteNpy(path, spec, data.data(), data.size()).ok());
    TensorSpec read_spec;
    std::string read_data;
    Status s = ReadNpy(path, &read_spec, &read_data);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(read_spec, spec);
    EXPECT_EQ(read_data, data);
    std::remove(path.c_str());
  }
}

TEST(NpyTest, ScalarOneDimensionalAndEmptyShapes) {
  for (const auto& shape :
       std::vector<std::vector<int64_t>>{{}, {5}, {0}, {3, 0, 2}, {1, 1, 1, 1, 1, 1, 1, 1}}) {
    TensorSpec spec{DType::kFloat64, shape};
    std::string data = Pattern(*ByteSize(spec));
    std::string bytes;
    ASSERT_TRUE(SerializeNpy(spec, data.data(), data.size(), &bytes).ok());
    TensorSpec back;
    std::string back_data;
    Status s = ParseNpy(bytes, &back, &back_data);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(back, spec);
    EXPECT_EQ(back_data, data);
  }
}

TEST(NpyTest, WrittenHeaderMatchesNumpysLayout) {
  std::string header;
  ASSERT_TRUE(MakeNpyHeader({DType::kFloat32, {3}}, &header).ok());
  EXPECT_EQ(header.size() % 64, 0u);
  EXPECT_EQ(header.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(header.back(), '\n');
  EXPECT_THAT(header, HasSubstr("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"));
  ASSERT_TRUE(MakeNpyHeader({DType::kBool, {}}, &header).ok());
  EXPECT_THAT(header, HasSubstr("'descr': '|b1'"));
  EXPECT_THAT(header, HasSubstr("'shape': ()"));
  ASSERT_TRUE(MakeNpyHeader({DType::kInt16, {2, 7}}, &header).ok());
  EXPECT_THAT(header, HasSubstr("'shape': (2, 7)"));
}

TEST(NpyTest, ReadsHeadersInAnyKeyOrderWithOrWithoutTrailingComma) {
  std::string data = Pattern(24);
  for (const char* dict : {"{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",
                           "{\"descr\": \"<f4\", \"shape\": (2,3), \"fortran_order\": False,}",
                           "{ 'fortran_order' : False , 'descr':'<f4','shape':(2L, 3L), }"}) {
    SCOPED_TRACE(dict);
    TensorSpec spec;
    std::string out;
    Status s = ParseNpy(BuildNpy(dict, data), &spec, &out);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(spec, (TensorSpec{DType::kFloat32, {2, 3}}));
    EXPECT_EQ(out, data);
  }
}

TEST(NpyTest, ReadsFormatVersions2And3) {
  std::string data = Pattern(8);
  for (int major : {2, 3}) {
    TensorSpec spec;
    std::string out;
    Status s =
        ParseNpy(BuildNpy("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", data, major),
                 &spec, &out);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(spec, (TensorSpec{DType::kInt64, {1}}));
    EXPECT_EQ(out, data);
  }
}

TEST(NpyTest, RejectsBigEndian) {
  TensorSpec spec;
  std::string out;
  Status s =
      ParseNpy(BuildNpy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", Pattern(8)),
               &spec, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("big-endian arrays are not supported"));
  EXPECT_THAT(s.message(), HasSubstr("convert with arr.astype('<f4')"));
  // One-byte elements have no byte order.
  EXPECT_TRUE(ParseNpy(BuildNpy("{'descr': '>u1', 'fortran_order': False, 'shape': (2,), }", "ab"),
                       &spec, &out)
                  .ok());
  EXPECT_EQ(spec.dtype, DType::kUInt8);
}

TEST(NpyTest, RejectsFortranOrder) {
  TensorSpec spec;
  std::string out;
  Status s =
      ParseNpy(BuildNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", Pattern(24)),
               &spec, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("Fortran-ordered arrays not supported; use np.ascontiguousarray"));
  // For rank <= 1 both orders are the same bytes.
  EXPECT_TRUE(
      ParseNpy(BuildNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (6,), }", Pattern(24)),
               &spec, &out)
          .ok());
}

TEST(NpyTest, RejectsUnsupportedAndStructuredDescr) {
  TensorSpec spec;
  std::string out;
  Status s =
      ParseNpy(BuildNpy("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", Pattern(8)),
               &spec, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("unsupported .npy dtype descr '<c8'"));
  EXPECT_THAT(s.message(), HasSubstr("'<f4' (float32)"));
  s = ParseNpy(BuildNpy("{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, "
                        "'shape': (1,), }",
                        Pattern(8)),
               &spec, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("structured (record) dtypes are not supported"));
}

TEST(NpyTest, RejectsTruncatedAndOversizedData) {
  TensorSpec spec;
  std::string out;
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  Status s = ParseNpy(BuildNpy(dict, Pattern(20)), &spec, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "truncated .npy file: float32 [2, 3] expected 24 data bytes, got 20");
  s = ParseNpy(BuildNpy(dict, Pattern(28)), &spec, &out);
  EXPECT_EQ(s.message(),
            "trailing bytes in .npy file: float32 [2, 3] expected 24 data bytes, got 28");
  // A file cut inside its header.
  std::string whole = BuildNpy(dict, Pattern(24));
  s = ParseNpy(whole.substr(0, 30), &spec, &out);
  EXPECT_THAT(s.message(), HasSubstr("truncated .npy file: expected a header of"));
  s = ParseNpy(whole.substr(0, 9), &spec, &out);
  EXPECT_THAT(s.message(), HasSubstr("truncated .npy file: expected 10 bytes of preamble, got 9"));
}

TEST(NpyTest, TruncatedFileErrorNamesThePath) {
  std::string path = TempPath("truncated.npy");
  WriteFile(path,
            BuildNpy("{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", Pattern(10)));
  TensorSpec spec;
  std::string data;
  Status s = ReadNpy(path, &spec, &data);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": truncated .npy file: int32 [4] expected 16 data bytes, got 10");
  std::remove(path.c_str());
  s = ReadNpy(path, &spec, &data);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(path + ": cannot open"));
}

TEST(NpyTest, RejectsBadMagicAndVersion) {
  TensorSpec spec;
  std::string out;
  Status s = ParseNpy("PK\x03\x04 this is a zip", &spec, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("not a .npy file: expected magic \\x93NUMPY, got \"PK\\x03\\x04"));
  s = ParseNpy("", &spec, &out);
  EXPECT_THAT(s.message(), HasSubstr("not a .npy file"));
  std::string v4 = BuildNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", Pattern(4));
  v4[6] = 4;
  s = ParseNpy(v4, &spec, &out);
  EXPECT_EQ(s.message(), "unsupported .npy format version 4.0 (supported: 1.0, 2.0, 3.0)");
}

TEST(NpyTest, RejectsMalformedHeaders) {
  TensorSpec spec;
  std::string out;
  for (const char* dict :
       {"{'descr': '<f4', 'fortran_order': False}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2.0,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)",
        "{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", "['descr', '<f4']",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}"}) {
    SCOPED_TRACE(dict);
    Status s = ParseNpy(BuildNpy(dict, Pattern(8)), &spec, &out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(s.message().empty());
  }
}

TEST(NpyTest, Bfloat16CannotBeWritten) {
  std::string data(4, '\0');
  std::string bytes;
  Status s = SerializeNpy({DType::kBFloat16, {2}}, data.data(), data.size(), &bytes);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("bfloat16 cannot be written to a .npy file"));
  s = WriteNpy(TempPath("bf16.npy"), {DType::kBFloat16, {2}}, data.data(), data.size());
  EXPECT_THAT(s.message(), HasSubstr("numpy has no bfloat16 dtype"));
}

TEST(NpyTest, WriteChecksByteCount) {
  std::string data(10, '\0');
  std::string bytes;
  Status s = SerializeNpy({DType::kFloat32, {3}}, data.data(), data.size(), &bytes);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("expected 12 data bytes, got 10"));
}

TEST(NpyTest, HeaderLengthFieldCoversThePadding) {
  // With rank <= 8 a header never outgrows format 1.0's 16-bit length, so 1.0 is what we write.
  std::string header;
  ASSERT_TRUE(MakeNpyHeader({DType::kUInt8, {int64_t{1} << 40}}, &header).ok());
  EXPECT_EQ(header[6], 1);
  size_t len = static_cast<unsigned char>(header[8]) | static_cast<unsigned char>(header[9]) << 8;
  EXPECT_EQ(len + 10, header.size());
}

// Runs `script` with the system numpy; false when that is unavailable.
bool RunNumpy(const std::string& script) {
  if (access(kPython, X_OK) != 0) return false;
  std::string check = std::string(kPython) + " -c 'import numpy' >/dev/null 2>&1";
  if (std::system(check.c_str()) != 0) return false;
  std::string command = std::string(kPython) + " -c \"" + script + "\"";
  int rc = std::system(command.c_str());
  return WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

TEST(NpyTest, ReadsFilesWrittenByNumpy) {
  std::string f32 = TempPath("np_f32.npy");
  std::string scalar = TempPath("np_scalar.npy");
  std::string boolean = TempPath("np_bool.npy");
  std::string fortran = TempPath("np_fortran.npy");
  std::string big = TempPath("np_big.npy");
  std::string script =
      "import numpy as np; "
      "np.save('" +
      f32 +
      "', np.arange(12, dtype=np.float32).reshape(3, 4)); "
      "np.save('" +
      scalar +
      "', np.int64(-7)); "
      "np.save('" +
      boolean +
      "', np.array([True, False, True])); "
      "np.save('" +
      fortran +
      "', np.asfortranarray(np.ones((2, 3), dtype=np.float32))); "
      "np.save('" +
      big + "', np.arange(3, dtype='>f8'))";
  if (!RunNumpy(script)) GTEST_SKIP() << kPython << " with numpy is not available";

  TensorSpec spec;
  std::string data;
  ASSERT_TRUE(ReadNpy(f32, &spec, &data).ok());
  EXPECT_EQ(spec, (TensorSpec{DType::kFloat32, {3, 4}}));
  ASSERT_EQ(data.size(), 48u);
  float values[12];
  std::memcpy(values, data.data(), sizeof(values));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(values[i], static_cast<float>(i));

  ASSERT_TRUE(ReadNpy(scalar, &spec, &data).ok());
  EXPECT_EQ(spec, (TensorSpec{DType::kInt64, {}}));
  int64_t value = 0;
  std::memcpy(&value, data.data(), sizeof(value));
  EXPECT_EQ(value, -7);

  ASSERT_TRUE(ReadNpy(boolean, &spec, &data).ok());
  EXPECT_EQ(spec, (TensorSpec{DType::kBool, {3}}));
  EXPECT_EQ(data, std::string("\x01\x00\x01", 3));

  Status s = ReadNpy(fortran, &spec, &data);
  EXPECT_THAT(s.message(), HasSubstr("Fortran-ordered arrays not supported"));
  s = ReadNpy(big, &spec, &data);
  EXPECT_THAT(s.message(), HasSubstr("convert with arr.astype('<f8')"));
  for (const auto& p : {f32, scalar, boolean, fortran, big}) std::remove(p.c_str());
}

TEST(NpyTest, NumpyReadsFilesWeWrite) {
  std::string path = TempPath("ours.npy");
  TensorSpec spec{DType::kInt32, {2, 2}};
  int32_t values[4] = {1, -2, 3, 40000};
  ASSERT_TRUE(WriteNpy(path, spec, values, sizeof(values)).ok());
  std::string script = "import numpy as np; a = np.load('" + path +
                       "'); assert a.dtype == np.int32 and a.shape == (2, 2), a; "
                       "assert a.tolist() == [[1, -2], [3, 40000]], a";
  if (access(kPython, X_OK) != 0 ||
      std::system((std::string(kPython) + " -c 'import numpy' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << kPython << " with numpy is not available";
  }
  EXPECT_TRUE(RunNumpy(script));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace torchfarm
