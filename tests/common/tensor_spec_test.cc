#include "common/tensor_spec.h"

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

TEST(TensorSpecTest, Formatting) {
  EXPECT_EQ(ShapeToString({}), "[]");
  EXPECT_EQ(ShapeToString({3}), "[3]");
  EXPECT_EQ(ShapeToString({-1, 256}), "[-1, 256]");
  EXPECT_EQ(SpecToString({DType::kInt64, {2, 3}}), "int64 [2, 3]");
  EXPECT_EQ(SpecToString({DType::kFloat32, {}}), "float32 []");
}

TEST(TensorSpecTest, NumElementsAndByteSize) {
  EXPECT_EQ(NumElements({}), 1u);  // a scalar has one element
  EXPECT_EQ(NumElements({0, 5}), 0u);
  EXPECT_EQ(NumElements({2, 3, 4}), 24u);
  EXPECT_EQ(ByteSize({DType::kFloat64, {2, 3}}), 48u);
  EXPECT_EQ(ByteSize({DType::kBool, {7}}), 7u);
  EXPECT_EQ(ByteSize({DType::kFloat16, {}}), 2u);
}

TEST(TensorSpecTest, NegativeAndOverflowingShapesHaveNoSize) {
  EXPECT_FALSE(NumElements({-1, 4}).has_value());
  EXPECT_FALSE(NumElements({int64_t{1} << 40, int64_t{1} << 40}).has_value());
  EXPECT_FALSE(ByteSize({DType::kFloat64, {int64_t{1} << 61}}).has_value());
  EXPECT_TRUE(ByteSize({DType::kUInt8, {int64_t{1} << 61}}).has_value());
  // The limit is 2^62 elements, itself included, however the dimensions split it.
  EXPECT_EQ(NumElements({int64_t{1} << 62}), uint64_t{1} << 62);
  EXPECT_EQ(NumElements({int64_t{1} << 31, int64_t{1} << 31}), uint64_t{1} << 62);
  EXPECT_FALSE(NumElements({(int64_t{1} << 62) + 1}).has_value());
  EXPECT_FALSE(NumElements({int64_t{1} << 31, (int64_t{1} << 31) + 1}).has_value());
  // A product that wraps 64 bits to something small is still too large.
  EXPECT_FALSE(NumElements({int64_t{1} << 32, int64_t{1} << 32, 2}).has_value());
  EXPECT_FALSE(NumElements({3, INT64_MAX, 3}).has_value());
  // A zero anywhere is zero elements, even after a huge dimension.
  EXPECT_EQ(NumElements({int64_t{1} << 62, 0}), 0u);
  EXPECT_EQ(NumElements({0, INT64_MAX, INT64_MAX}), 0u);
}

TEST(TensorSpecTest, CheckAgainstDeclaredAcceptsWildcards) {
  TensorSpec declared{DType::kFloat32, {-1, 256}};
  EXPECT_TRUE(CheckAgainstDeclared(declared, {DType::kFloat32, {1, 256}}, 0).ok());
  EXPECT_TRUE(CheckAgainstDeclared(declared, {DType::kFloat32, {64, 256}}, 0).ok());
}

TEST(TensorSpecTest, CheckAgainstDeclaredNamesWhatDiffers) {
  TensorSpec declared{DType::kFloat32, {-1, 256}};
  Status s = CheckAgainstDeclared(declared, {DType::kFloat32, {1, 255}}, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "input 2: shape mismatch: expected float32 [-1, 256], got float32 [1, 255]");
  s = CheckAgainstDeclared(declared, {DType::kFloat64, {1, 256}}, 0);
  EXPECT_EQ(s.message(),
            "input 0: dtype mismatch: expected float32 [-1, 256], got float64 [1, 256]");
  s = CheckAgainstDeclared(declared, {DType::kFloat32, {256}}, 1);
  EXPECT_EQ(s.message(), "input 1: rank mismatch: expected float32 [-1, 256], got float32 [256]");
}

TEST(TensorSpecTest, RowsAndEquality) {
  EXPECT_EQ(Rows({DType::kFloat32, {}}), 1);
  EXPECT_EQ(Rows({DType::kFloat32, {5, 2}}), 5);
  EXPECT_TRUE((TensorSpec{DType::kInt8, {1}} == TensorSpec{DType::kInt8, {1}}));
  EXPECT_FALSE((TensorSpec{DType::kInt8, {1}} == TensorSpec{DType::kUInt8, {1}}));
  EXPECT_FALSE((TensorSpec{DType::kInt8, {1}} == TensorSpec{DType::kInt8, {1, 1}}));
}

}  // namespace
}  // namespace torchfarm
