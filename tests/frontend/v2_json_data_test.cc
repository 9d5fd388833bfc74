// v2_json_data: JSON numbers <-> tensor bytes, and the FP16/BF16 conversions.
#include "supervisor/frontend/v2_json_data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace torchfarm {
namespace {

using nlohmann::json;

template <typename T>
std::vector<T> Values(const zmq::message_t& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

Status Decode(const std::string& text, DType dtype, const std::string& datatype,
              std::vector<int64_t> shape, zmq::message_t* out) {
  return DecodeJsonData(json::parse(text), dtype, datatype, shape, "inputs[0].data", out);
}

TEST(V2JsonDataTest, HalfRoundTripsEveryBitPattern) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = HalfToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(value)))) << bits;
      continue;
    }
    EXPECT_EQ(FloatToHalf(value), bits) << "half bits " << bits << " value " << value;
  }
}

TEST(V2JsonDataTest, HalfRoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // the tie rounds to even: infinity
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);       // tie to even: zero
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);       // tie to even: two
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie, even mantissa stays
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie, odd mantissa rounds up
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
}

// A JSON number just above a tie between two halves (or bfloat16s) must round up. Going through
// the nearest float first made it the tie itself, which then rounded to even: down.
TEST(V2JsonDataTest, JsonNumbersRoundOnceToHalfAndBFloat16) {
  zmq::message_t out;
  uint16_t bits[2];
  ASSERT_TRUE(Decode("[1.0004882812509095, -1.0004882812509095]", DType::kFloat16, "FP16", {2},
                     &out).ok());
  std::memcpy(bits, out.data(), sizeof bits);
  EXPECT_EQ(bits[0], 0x3c01);  // 1 + 2^-11 + 2^-40: above the tie of 1 and 1 + 2^-10
  EXPECT_EQ(bits[1], 0xbc01);
  ASSERT_TRUE(Decode("[1.0039062500009095, 1.0e-50]", DType::kBFloat16, "BF16", {2}, &out).ok());
  std::memcpy(bits, out.data(), sizeof bits);
  EXPECT_EQ(bits[0], 0x3f81);  // 1 + 2^-8 + 2^-40
  EXPECT_EQ(bits[1], 0x0000);
  // Exact ties still round to even.
  ASSERT_TRUE(Decode("[1.00048828125, 1.00146484375]", DType::kFloat16, "FP16", {2}, &out).ok());
  std::memcpy(bits, out.data(), sizeof bits);
  EXPECT_EQ(bits[0], 0x3c00);
  EXPECT_EQ(bits[1], 0x3c02);
}

TEST(V2JsonDataTest, BFloat16RoundTripsEveryBitPattern) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = BFloat16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    EXPECT_EQ(FloatToBFloat16(value), bits) << bits;
  }
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);   // tie to even
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
}

TEST(V2JsonDataTest, PrintedFloatsParseBackToTheSameBits) {
  std::mt19937 rng(17);
  std::vector<float> floats;
  while (floats.size() < 20000) {
    uint32_t bits = rng();
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    if (std::isfinite(value)) floats.push_back(value);
  }
  floats.push_back(std::numeric_limits<float>::denorm_min());
  floats.push_back(std::numeric_limits<float>::max());
  floats.push_back(-0.0f);
  std::string text;
  AppendJsonData(DType::kFloat32, floats.data(), floats.size(), &text);
  zmq::message_t back;
  ASSERT_TRUE(Decode(text, DType::kFloat32, "FP32", {static_cast<int64_t>(floats.size())}, &back)
                  .ok());
  ASSERT_EQ(back.size(), floats.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(back.data(), floats.data(), back.size()), 0);

  std::vector<double> doubles;
  for (int i = 0; i < 5000; ++i) {
    uint64_t bits = (uint64_t{rng()} << 32) | rng();
    double value;
    std::memcpy(&value, &bits, sizeof(value));
    if (std::isfinite(value)) doubles.push_back(value);
  }
  text.clear();
  AppendJsonData(DType::kFloat64, doubles.data(), doubles.size(), &text);
  ASSERT_TRUE(
      Decode(text, DType::kFloat64, "FP64", {static_cast<int64_t>(doubles.size())}, &back).ok());
  EXPECT_EQ(std::memcmp(back.data(), doubles.data(), back.size()), 0);
}

TEST(V2JsonDataTest, HalfAndBFloat16PrintAndParseBackExactly) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    std::vector<uint16_t> all;
    for (uint32_t bits = 0; bits < 0x10000; ++bits) {
      const float value =
          dtype == DType::kFloat16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
      if (std::isfinite(value)) all.push_back(static_cast<uint16_t>(bits));
    }
    std::string text;
    AppendJsonData(dtype, all.data(), all.size(), &text);
    zmq::message_t back;
    const std::string name = dtype == DType::kFloat16 ? "FP16" : "BF16";
    ASSERT_TRUE(Decode(text, dtype, name, {static_cast<int64_t>(all.size())}, &back).ok()) << name;
    EXPECT_EQ(std::memcmp(back.data(), all.data(), back.size()), 0) << name;
  }
}

TEST(V2JsonDataTest, NonFiniteFloatsPrintAsNull) {
  const float values[] = {std::numeric_limits<float>::infinity(), std::nanf(""), 1.5f};
  std::string text;
  AppendJsonData(DType::kFloat32, values, 3, &text);
  EXPECT_EQ(text, "[null,null,1.5]");
}

TEST(V2JsonDataTest, IntegersAndBoolsPrintAsJsonNumbers) {
  const int8_t i8[] = {-128, 127};
  const uint8_t u8[] = {0, 255};
  const int64_t i64[] = {std::numeric_limits<int64_t>::min(), 42};
  const uint8_t flags[] = {1, 0};
  std::string text;
  AppendJsonData(DType::kInt8, i8, 2, &text);
  AppendJsonData(DType::kUInt8, u8, 2, &text);
  AppendJsonData(DType::kInt64, i64, 2, &text);
  AppendJsonData(DType::kBool, flags, 2, &text);
  EXPECT_EQ(text, "[-128,127][0,255][-9223372036854775808,42][true,false]");
}

TEST(V2JsonDataTest, DecodesEveryIntegerTypeAtItsLimits) {
  zmq::message_t out;
  ASSERT_TRUE(Decode("[-128, 127]", DType::kInt8, "INT8", {2}, &out).ok());
  EXPECT_EQ(Values<int8_t>(out), (std::vector<int8_t>{-128, 127}));
  ASSERT_TRUE(Decode("[-32768, 32767]", DType::kInt16, "INT16", {2}, &out).ok());
  EXPECT_EQ(Values<int16_t>(out), (std::vector<int16_t>{-32768, 32767}));
  ASSERT_TRUE(Decode("[-2147483648, 2147483647]", DType::kInt32, "INT32", {2}, &out).ok());
  EXPECT_EQ(Values<int32_t>(out), (std::vector<int32_t>{INT32_MIN, INT32_MAX}));
  ASSERT_TRUE(Decode("[-9223372036854775808, 9223372036854775807]", DType::kInt64, "INT64", {2},
                     &out).ok());
  EXPECT_EQ(Values<int64_t>(out), (std::vector<int64_t>{INT64_MIN, INT64_MAX}));
  ASSERT_TRUE(Decode("[0, 255]", DType::kUInt8, "UINT8", {2}, &out).ok());
  EXPECT_EQ(Values<uint8_t>(out), (std::vector<uint8_t>{0, 255}));
  ASSERT_TRUE(Decode("[true, false]", DType::kBool, "BOOL", {2}, &out).ok());
  EXPECT_EQ(Values<uint8_t>(out), (std::vector<uint8_t>{1, 0}));
}

TEST(V2JsonDataTest, NestedDataIsReadRowMajor) {
  zmq::message_t out;
  ASSERT_TRUE(Decode("[[1, 2, 3], [4, 5, 6]]", DType::kFloat32, "FP32", {2, 3}, &out).ok());
  EXPECT_EQ(Values<float>(out), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  ASSERT_TRUE(Decode("[1.5]", DType::kFloat64, "FP64", {}, &out).ok());  // a scalar
  EXPECT_EQ(Values<double>(out), (std::vector<double>{1.5}));
  ASSERT_TRUE(Decode("[]", DType::kInt32, "INT32", {0, 4}, &out).ok());
  EXPECT_EQ(out.size(), 0u);
}

TEST(V2JsonDataTest, ErrorsNameTheElementTheExpectationAndWhatCame) {
  zmq::message_t out;
  Status s = Decode("[1, 2, 3, 4, 5]", DType::kFloat32, "FP32", {2, 3}, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "inputs[0].data: expected 6 FP32 values for shape [2, 3], got 5");
  s = Decode("[1, 300]", DType::kInt8, "INT8", {2}, &out);
  EXPECT_EQ(s.message(), "inputs[0].data[1]: expected an integer in -128..127 for INT8, got 300");
  s = Decode("[-1]", DType::kUInt8, "UINT8", {1}, &out);
  EXPECT_EQ(s.message(), "inputs[0].data[0]: expected an integer in 0..255 for UINT8, got -1");
  s = Decode("[1.5]", DType::kInt32, "INT32", {1}, &out);
  EXPECT_EQ(s.message(),
            "inputs[0].data[0]: expected an integer in -2147483648..2147483647 for INT32, got 1.5");
  s = Decode("[18446744073709551615]", DType::kInt64, "INT64", {1}, &out);
  EXPECT_NE(s.message().find("got 18446744073709551615"), std::string::npos) << s.message();
  s = Decode("[true, 1]", DType::kBool, "BOOL", {2}, &out);
  EXPECT_EQ(s.message(), "inputs[0].data[1]: expected true or false for BOOL, got 1");
  s = Decode("[\"a\"]", DType::kFloat32, "FP32", {1}, &out);
  EXPECT_EQ(s.message(), "inputs[0].data[0]: expected a number for FP32, got \"a\"");
  s = Decode("[1e39]", DType::kFloat32, "FP32", {1}, &out);
  EXPECT_NE(s.message().find("out of the FP32 range"), std::string::npos) << s.message();
  s = Decode("[70000]", DType::kFloat16, "FP16", {1}, &out);
  EXPECT_NE(s.message().find("out of the FP16 range (largest magnitude 65504)"),
            std::string::npos) << s.message();
  s = Decode("[1e39]", DType::kBFloat16, "BF16", {1}, &out);
  EXPECT_NE(s.message().find("out of the BF16 range"), std::string::npos) << s.message();
  s = Decode("{\"a\": 1}", DType::kFloat32, "FP32", {1}, &out);
  EXPECT_EQ(s.message(), "inputs[0].data: expected an array of 1 FP32 values, got object");
  s = Decode("[[1, 2], [3, true]]", DType::kFloat32, "FP32", {2, 2}, &out);
  EXPECT_EQ(s.message(), "inputs[0].data[3]: expected a number for FP32, got true");
}

}  // namespace
}  // namespace torchfarm
