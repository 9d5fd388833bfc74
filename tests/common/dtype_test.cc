#include "common/dtype.h"

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

struct Expected {
  DType dtype;
  const char* name;
  size_t size;
  const char* descr;
};

constexpr Expected kAll[] = {
    {DType::kFloat32, "float32", 4, "<f4"}, {DType::kFloat64, "float64", 8, "<f8"},
    {DType::kFloat16, "float16", 2, "<f2"}, {DType::kBFloat16, "bfloat16", 2, ""},
    {DType::kInt64, "int64", 8, "<i8"},     {DType::kInt32, "int32", 4, "<i4"},
    {DType::kInt16, "int16", 2, "<i2"},     {DType::kInt8, "int8", 1, "|i1"},
    {DType::kUInt8, "uint8", 1, "|u1"},     {DType::kBool, "bool", 1, "|b1"},
};

TEST(DTypeTest, NamesSizesAndDescriptorsOfEveryType) {
  for (const auto& e : kAll) {
    SCOPED_TRACE(e.name);
    EXPECT_EQ(DTypeName(e.dtype), e.name);
    EXPECT_EQ(DTypeSize(e.dtype), e.size);
    EXPECT_EQ(DTypeNumpyDescr(e.dtype), e.descr);
    EXPECT_EQ(ParseDType(e.name), e.dtype);
    EXPECT_EQ(DTypeFromCode(static_cast<uint8_t>(e.dtype)), e.dtype);
    if (e.descr[0] != '\0') {
      EXPECT_EQ(DTypeFromNumpyDescr(e.descr), e.dtype);
    }
  }
}

TEST(DTypeTest, SharedMemoryCodesAreStable) {
  EXPECT_EQ(static_cast<int>(DType::kFloat32), 1);
  EXPECT_EQ(static_cast<int>(DType::kBool), 10);
  EXPECT_EQ(static_cast<int>(DType::kBytes), 11);  // appended for the image pipeline
  EXPECT_FALSE(DTypeFromCode(0).has_value());
  EXPECT_FALSE(DTypeFromCode(12).has_value());
  EXPECT_FALSE(DTypeFromCode(255).has_value());
}

TEST(DTypeTest, UnknownNamesAreRejected) {
  EXPECT_FALSE(ParseDType("float").has_value());
  EXPECT_FALSE(ParseDType("Float32").has_value());
  EXPECT_FALSE(ParseDType("").has_value());
  EXPECT_FALSE(ParseDType("complex64").has_value());
}

TEST(DTypeTest, DescriptorVariants) {
  EXPECT_EQ(DTypeFromNumpyDescr("=f4"), DType::kFloat32);
  EXPECT_EQ(DTypeFromNumpyDescr("=i8"), DType::kInt64);
  EXPECT_EQ(DTypeFromNumpyDescr("<u1"), DType::kUInt8);
  EXPECT_EQ(DTypeFromNumpyDescr("<i1"), DType::kInt8);
  EXPECT_EQ(DTypeFromNumpyDescr("=b1"), DType::kBool);
  EXPECT_FALSE(DTypeFromNumpyDescr(">f4").has_value());
  EXPECT_FALSE(DTypeFromNumpyDescr("<c8").has_value());
  EXPECT_FALSE(DTypeFromNumpyDescr("<U4").has_value());
  EXPECT_FALSE(DTypeFromNumpyDescr("|O").has_value());
  EXPECT_FALSE(DTypeFromNumpyDescr("").has_value());
}

TEST(DTypeTest, AllNamesListsEveryTypeInOrder) {
  EXPECT_EQ(AllDTypeNames(),
            "float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8, bool, bytes");
}

}  // namespace
}  // namespace torchfarm
