// v2_request_scanner: the fast path of ParseV2InferRequest against the DOM path. For good requests
// both must give the same V2InferRequest, field by field and byte by byte; for hostile ones the
// fast path must give up or agree; ParseV2InferRequest must answer exactly as the DOM path does.
#include "supervisor/frontend/v2_request_scanner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "supervisor/frontend/json_cursor.h"
#include "supervisor/frontend/v2_http_codec.h"
#include "supervisor/frontend/v2_json_data.h"

namespace torchfarm {
namespace {

std::string Describe(const V2ShmPlace& shm) {
  return shm.region + "@" + std::to_string(shm.offset) + "+" + std::to_string(shm.byte_size);
}

// Every field of two requests, tensor bytes included; empty when they are the same.
std::string Difference(const V2InferRequest& a, const V2InferRequest& b) {
  if (a.model != b.model || a.version != b.version) return "model or version";
  if (a.id != b.id) return "id '" + a.id + "' vs '" + b.id + "'";
  if (a.binary_outputs != b.binary_outputs) return "binary_outputs";
  if (a.timeout_ms != b.timeout_ms) return "timeout_ms";
  if (a.priority != b.priority) return "priority";
  if (std::memcmp(&a.client_weight, &b.client_weight, sizeof(double)) != 0) return "client_weight";
  if (a.inputs.size() != b.inputs.size()) return "input count";
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const V2Tensor& x = a.inputs[i];
    const V2Tensor& y = b.inputs[i];
    const std::string at = "inputs[" + std::to_string(i) + "].";
    if (x.name != y.name) return at + "name";
    if (x.datatype != y.datatype) return at + "datatype";
    if (x.shape != y.shape) return at + "shape";
    if (Describe(x.shm) != Describe(y.shm)) return at + "shm";
    if (x.data.size() != y.data.size()) return at + "data size";
    if (x.data.size() != 0 && std::memcmp(x.data.data(), y.data.data(), x.data.size()) != 0) {
      return at + "data bytes";
    }
  }
  if (a.outputs.size() != b.outputs.size()) return "output count";
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    const V2RequestedOutput& x = a.outputs[i];
    const V2RequestedOutput& y = b.outputs[i];
    const std::string at = "outputs[" + std::to_string(i) + "].";
    if (x.name != y.name) return at + "name";
    if (x.binary != y.binary) return at + "binary";
    if (x.class_count != y.class_count) return at + "class_count";
    if (Describe(x.shm) != Describe(y.shm)) return at + "shm";
  }
  return "";
}

// A request as a caller may hand it in: fields set before the parse, which the parse keeps.
V2InferRequest Prefilled() {
  V2InferRequest request;
  request.model = "m";
  request.version = "3";
  request.id = "before";
  request.timeout_ms = 9;
  request.outputs.push_back(V2RequestedOutput{"earlier", true, 0, {}});
  return request;
}

struct Outcome {
  bool fast = false;
  Status dom;
  std::string difference;  // fast vs DOM, when both took it
  Status combined;         // ParseV2InferRequest
};

Outcome RunBoth(const std::string& text, size_t json_bytes = std::string::npos) {
  auto body = std::make_shared<const std::string>(text);
  if (json_bytes == std::string::npos) json_bytes = text.size();
  Outcome outcome;
  V2InferRequest fast = Prefilled(), dom = Prefilled(), combined = Prefilled();
  outcome.fast = ParseV2InferRequestFast(body, json_bytes, &fast);
  if (!outcome.fast) {
    // Giving up leaves the request as it was.
    outcome.difference = Difference(fast, Prefilled());
  }
  outcome.dom = ParseV2InferRequestJson(body, json_bytes, &dom);
  if (outcome.fast) {
    outcome.difference =
        outcome.dom.ok() ? Difference(fast, dom) : "fast took it, DOM: " + outcome.dom.message();
  }
  outcome.combined = ParseV2InferRequest(body, json_bytes, &combined);
  if (outcome.combined.ok() && outcome.dom.ok() && outcome.difference.empty()) {
    outcome.difference = Difference(combined, dom);
  }
  return outcome;
}

// Fast and DOM both take it and agree.
void ExpectSame(const std::string& text, size_t json_bytes = std::string::npos) {
  const Outcome outcome = RunBoth(text, json_bytes);
  EXPECT_TRUE(outcome.fast) << "the fast path gave up on: " << text.substr(0, 300);
  EXPECT_TRUE(outcome.dom.ok()) << outcome.dom.message() << ": " << text.substr(0, 300);
  EXPECT_EQ(outcome.difference, "") << text.substr(0, 300);
}

// The fast path gives up or agrees, and the combined parse answers as the DOM path does.
void ExpectSafe(const std::string& text, size_t json_bytes = std::string::npos) {
  const Outcome outcome = RunBoth(text, json_bytes);
  EXPECT_EQ(outcome.difference, "") << text.substr(0, 300);
  EXPECT_EQ(outcome.combined.code(), outcome.dom.code()) << text.substr(0, 300);
  EXPECT_EQ(outcome.combined.message(), outcome.dom.message()) << text.substr(0, 300);
}

std::string Input(const std::string& datatype, const std::string& shape, const std::string& data,
                  const std::string& name = "x") {
  return R"({"name": ")" + name + R"(", "datatype": ")" + datatype + R"(", "shape": )" + shape +
         R"(, "data": )" + data + "}";
}

std::string Request(const std::string& inputs, const std::string& rest = "") {
  return R"({"inputs": [)" + inputs + "]" + rest + "}";
}

TEST(V2RequestScannerTest, JsonDataOfEveryDatatypeMatchesTheDomPath) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"FP32",
       "[1.5, -2, 0, -0, -0.0, 0.1, 3.4028234663852886e38, 1e-45, 1e-46, 16777217, "
       "18446744073709551615, -9223372036854775808, 2.5E3, 1e+2, 7E-1, "
       // Beside the tie between 0.5 and the next float (0.5 + 2^-25): 17, 19 and 22 digits, the
       // first two reading to the tie itself as a double, so the cast takes the even 0.5.
       "0.50000002980232239, 0.5000000298023223877, 0.5000000298023223877000001, "
       "0.4731886386871338, 0.000000000000000000001234567890123456789, 1234567890123456789012.5]"},
      {"FP64",
       "[0.1, -0.0, -0, 1.7976931348623157e308, 4.9e-324, 9007199254740993, "
       "123456789012345678, 2.2250738585072014e-308]"},
      {"FP16",
       "[1.0, 65504, 65519.99, -65519, 0.333, 5.96e-8, 2.98e-8, 2.99e-8, 1e-10, -0, "
       "6.103515625e-05, 0.000060975551605224609375]"},
      {"BF16", "[1.0, 3.3895313892515355e38, -3.38e38, 1.00390625, 1.01171875, 1e-40, -0]"},
      {"INT64", "[-9223372036854775808, 9223372036854775807, 0, -0, 5]"},
      {"INT32", "[-2147483648, 2147483647, -0, 7]"},
      {"INT16", "[-32768, 32767, -300]"},
      {"INT8", "[-128, 127, -1, -0]"},
      {"UINT8", "[0, 255, 200, -0]"},
      {"BOOL", "[true, false, true]"},
  };
  for (const auto& [datatype, data] : cases) {
    const size_t count = static_cast<size_t>(std::count(data.begin(), data.end(), ',')) + 1;
    ExpectSame(Request(Input(datatype, "[" + std::to_string(count) + "]", data)));
    // The same values nested, in a rank-2 shape and unevenly (v2 reads leaves in order).
    if (count % 2 == 0) {
      std::string nested = "[[" + data.substr(1, data.size() - 2) + "]]";
      ExpectSame(Request(Input(datatype, "[2, " + std::to_string(count / 2) + "]", nested)));
    }
  }
  ExpectSame(Request(Input("FP32", "[2, 3]", "[[1, 2], [3, [4, [5]]], [], [[6]]]")));
  ExpectSame(Request(Input("INT8", "[0]", "[]")));
  ExpectSame(Request(Input("INT8", "[0, 4]", "[[], [[]]]")));
  ExpectSame(Request(Input("FP32", "[]", "[2.5]")));  // a scalar: one element, in an array
  // An exponent too long to collect must not cancel a fraction's leading zeros: 0.(99,999
  // zeros)1e1000000 overflows (the DOM path refuses it), it does not read as 1.
  const std::string lying = "0." + std::string(99'999, '0') + "1e1000000";
  for (const char* datatype : {"FP32", "FP64", "FP16", "BF16"}) {
    ExpectSafe(Request(Input(datatype, "[1]", "[" + lying + "]")));
    V2InferRequest request;
    const std::string body = Request(Input(datatype, "[1]", "[" + lying + "]"));
    EXPECT_FALSE(
        ParseV2InferRequest(std::make_shared<const std::string>(body), body.size(), &request).ok())
        << datatype;
  }
}

// Digits are read up to eight at a time: runs of every length from 1 to 24 in the whole part and
// the fraction, at every offset from an eight-byte boundary and from the end of the JSON, read as
// the DOM path reads them; and any byte after a run is left to the DOM path's verdict.
TEST(V2RequestScannerTest, DigitRunsOfEveryLengthAndPlaceMatchTheDomPath) {
  const std::string digits = "123456789012345678901234";
  for (size_t whole = 1; whole <= 24; ++whole) {
    for (size_t fraction = 0; fraction <= 24; fraction += (whole % 3) + 1) {
      std::string number = digits.substr(0, whole);
      if (fraction > 0) number += "." + digits.substr(24 - fraction);
      for (const char* datatype : {"FP32", "FP64"}) {
        std::string data = "[";
        for (int pad = 0; pad < 8; ++pad) {
          data += (pad ? ", " : "") + std::string(static_cast<size_t>(pad), ' ') + number;
          data += ", -0." + digits.substr(0, fraction + 1);
        }
        // An integer past 64 bits, which nlohmann reads as a float, is the DOM path's.
        const std::string request = Request(Input(datatype, "[16]", data + "]"));
        fraction == 0 && whole >= 20 ? ExpectSafe(request) : ExpectSame(request);
      }
      if (whole <= 18) {
        // The number last, with nothing but "]}]}" after it: fewer than eight bytes to read.
        ExpectSame(Request(Input("INT64", "[1]", "[" + digits.substr(0, whole) + "]")));
        ExpectSame(Request(Input("FP32", "[1]", "[" + number + "]")));
      }
    }
  }
  for (int byte = 1; byte < 256; ++byte) {
    const std::string after(1, static_cast<char>(byte));
    for (const char* number : {"0.123", "12345678", "0.1234567812345678", "1e1", "0"}) {
      ExpectSafe(Request(Input("FP32", "[2]", std::string("[") + number + after + ", 1.5]")));
    }
  }
}

// A short run of digits is read as the sixteen bytes that end with it, so never where those would
// start before the text: numbers at the very start of a cursor's text, of every length, with room
// after them, read as the per-digit reader reads them.
TEST(JsonCursorTest, NumbersAtTheStartOfTheTextReadExactly) {
  const std::string digits = "98765432109876543210987";
  for (size_t length = 1; length <= 19; ++length) {
    const std::string whole = digits.substr(0, length);
    for (const std::string& text :
         {whole, whole + std::string(20, ' '), whole + ", 1" + std::string(20, ' ')}) {
      JsonCursor cursor(text);
      JsonNumber number;
      ASSERT_TRUE(cursor.Numeric(&number)) << text;
      EXPECT_EQ(number.kind, JsonNumber::kUnsigned) << text;
      EXPECT_EQ(number.unsigned_value, std::stoull(whole)) << text;
      EXPECT_EQ(cursor.position(), text.data() + length) << text;
    }
    const std::string fraction = "0." + whole + std::string(24, ' ');
    JsonCursor cursor(fraction);
    double value = 0;
    ASSERT_TRUE(cursor.DecimalForFloat(&value) || length > 15) << fraction;
    if (length <= 15) {
      EXPECT_EQ(value, std::stod("0." + whole)) << fraction;
    }
  }
  // Not numbers, or not JSON's: the cursor stays where it was.
  for (const std::string text : {"-", "01", "1.", ".5", "1e", "1e+", "-x", "0x10", "+1"}) {
    const std::string padded = text + std::string(20, ' ');
    JsonCursor cursor(padded);
    JsonNumber number;
    double value;
    EXPECT_FALSE(cursor.DecimalForFloat(&value)) << text;
    EXPECT_EQ(cursor.position(), padded.data()) << text;
    EXPECT_FALSE(cursor.Numeric(&number) && cursor.AtEnd()) << text;
  }
}

TEST(V2RequestScannerTest, EveryParameterAndKeyMatchesTheDomPath) {
  const std::string x = Input("FP32", "[1, 2]", "[1, 2]");
  // KServe's client sends model_name and model_version; anything unknown at the top is ignored.
  ExpectSame(Request(x, R"(, "model_name": "mlp", "model_version": "1", "id": "req-7")"));
  ExpectSame(R"({"id": "", "model_name": "m", "whatever": [1, {"a": [true, null, -1.5e3]}],
                 "inputs": [)" +
             x + "]}");
  ExpectSame(Request(x, R"(, "parameters": {"timeout": 1500, "priority": 2,
                                             "binary_data_output": true, "client_weight": 0.5,
                                             "sequence_id": 7, "other": {"a": [1]}})"));
  ExpectSame(Request(x, R"(, "parameters": {"timeout": 0, "priority": 18446744073709551615,
                                             "binary_data_output": false, "client_weight": 100})"));
  ExpectSame(Request(x, R"(, "parameters": {"timeout": 4611686018427387904, "priority": -0,
                                             "client_weight": 0.01})"));
  ExpectSame(Request(x, R"(, "parameters": {"timeout": -0, "client_weight": 3})"));
  ExpectSame(Request(x, R"(, "parameters": {}, "outputs": [])"));
  // Outputs with every parameter.
  ExpectSame(Request(x, R"(, "outputs": [
      {"name": "y", "parameters": {"binary_data": true}},
      {"name": "z", "parameters": {"classification": 3, "binary_data": false}},
      {"name": "w", "parameters": {"shared_memory_region": "out", "shared_memory_byte_size": 64,
                                   "shared_memory_offset": 16, "binary_data_size": 5}},
      {"name": "v", "parameters": {"shared_memory_region": "out", "shared_memory_byte_size": 8}},
      {"parameters": {"classification": 1073741824}, "name": "u"},
      {"name": "t", "parameters": {}}, {"name": "s"}])"));
  // Inputs in system shared memory, keys in any order, and "data" before its datatype.
  ExpectSame(Request(R"({"parameters": {"shared_memory_region": "in",
                                        "shared_memory_byte_size": 8, "shared_memory_offset": 0},
                         "shape": [2], "datatype": "FP32", "name": "a"},
                        {"data": [[1, 2], [3]], "shape": [3], "name": "b", "datatype": "INT16",
                         "parameters": {"sequence_start": true}},
                        {"shape": [1], "data": [true], "datatype": "BOOL", "name": "c"})"));
  // Whitespace of every JSON kind.
  ExpectSame("\r\n\t {\t\"inputs\"\n:\r[ " + x + " ] ,\"id\" : \"a\" }\n ");
}

TEST(V2RequestScannerTest, BinaryTensorsMatchTheDomPathAndReferenceTheBody) {
  std::string header = R"({"inputs": [
      {"name": "a", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}},
      {"name": "b", "datatype": "INT8", "shape": [3], "data": [1, 2, 3]},
      {"name": "c", "datatype": "UINT8", "shape": [2, 2], "parameters": {"binary_data_size": 4}},
      {"name": "d", "datatype": "FP64", "shape": [0], "parameters": {"binary_data_size": 0}}],
      "outputs": [{"name": "y", "parameters": {"binary_data": true}}]})";
  const std::string binary = "01234567wxyz";
  ExpectSame(header + binary, header.size());
  auto body = std::make_shared<const std::string>(header + binary);
  V2InferRequest request;
  ASSERT_TRUE(ParseV2InferRequestFast(body, header.size(), &request));
  EXPECT_EQ(request.inputs[0].data.data(), body->data() + header.size());  // zero-copy
  EXPECT_EQ(request.inputs[2].data.to_string(), "wxyz");
  // A binary part that does not add up: the fast path gives up, the DOM path words it.
  ExpectSafe(header + binary + "!", header.size());
  ExpectSafe(header + binary.substr(1), header.size());
  ExpectSafe(header + binary, header.size() - 1);
  ExpectSafe(header + binary, header.size() + 1);
}

TEST(V2RequestScannerTest, HostileBodiesAreLeftToTheDomPath) {
  const std::string x = Input("FP32", "[1]", "[1]");
  const std::vector<std::string> hostile = {
      "",
      " ",
      "{",
      "}",
      "[]",
      "null",
      "{}",
      R"({"inputs": []})",
      R"({"inputs": {}})",
      "\xEF\xBB\xBF" + Request(x),  // a byte-order mark: nlohmann skips it
      Request(x) + "x",
      Request(x) + "{}",
      Request(x, ","),
      Request(x + ","),
      Request(x, R"(, "id": 5)"),
      Request(x, R"(, "id": "a", "id": "b")"),
      Request(x, R"(, "id": "\u0041")"),
      Request(x, R"(, "id": "caf)"
                 "\xC3\xA9"
                 R"(")"),
      Request(x, R"(, "id": "bad)"
                 "\xFF"
                 R"(")"),
      Request(x, ", \"id\": \"a\x01\""),
      Request(x) + Request(x),
      R"({"inputs": [)" + x + "], \"inputs\": [" + x + "]}",
      Request(Input("FP32", "[1]", "[NaN]")),
      Request(Input("FP32", "[1]", "[Infinity]")),
      Request(Input("FP32", "[1]", "[1e999]")),
      Request(Input("FP32", "[1]", "[1e39]")),
      Request(Input("FP64", "[1]", "[1e-400]")),
      Request(Input("FP32", "[1]", "[-1e-400]")),
      Request(Input("FP16", "[1]", "[65520]")),
      Request(Input("FP16", "[1]", "[65519.999999]")),
      Request(Input("BF16", "[1]", "[3.3961775292304077e38]")),
      Request(Input("FP32", "[1]", "[3.4028235677973366e38]")),
      Request(Input("FP32", "[1]", "[01]")),
      Request(Input("FP32", "[1]", "[.5]")),
      Request(Input("FP32", "[1]", "[5.]")),
      Request(Input("FP32", "[1]", "[+5]")),
      Request(Input("FP32", "[1]", "[1e]")),
      Request(Input("FP32", "[1]", "[-]")),
      Request(Input("FP32", "[1]", "[0x10]")),
      Request(Input("FP32", "[1]", "[\"1\"]")),
      Request(Input("FP32", "[1]", "[null]")),
      Request(Input("FP32", "[1]", "[true]")),
      Request(Input("FP32", "[1]", "[{}]")),
      Request(Input("FP32", "[1]", "1")),
      Request(Input("FP32", "[2]", "[1]")),
      Request(Input("FP32", "[1]", "[1, 2]")),
      Request(Input("FP32", "[1]", "[1,]")),
      Request(Input("FP32", "[1]", "[[1]")),
      Request(Input("INT8", "[1]", "[128]")),
      Request(Input("INT8", "[1]", "[-129]")),
      Request(Input("INT8", "[1]", "[1.0]")),
      Request(Input("INT64", "[1]", "[1e2]")),
      Request(Input("INT64", "[1]", "[9223372036854775808]")),
      Request(Input("INT64", "[1]", "[-9223372036854775809]")),
      Request(Input("UINT8", "[1]", "[-1]")),
      Request(Input("UINT8", "[1]", "[256]")),
      Request(Input("FP32", "[1]", "[18446744073709551616]")),
      Request(Input("BOOL", "[1]", "[1]")),
      Request(Input("BOOL", "[1]", "[tru]")),
      Request(Input("BYTES", "[1]", "[\"a\"]")),
      Request(Input("FP33", "[1]", "[1]")),
      Request(Input("FP32", "[-1]", "[1]")),
      Request(Input("FP32", "[1.0]", "[1]")),
      Request(Input("FP32", "[1,1,1,1,1,1,1,1,1]", "[1]")),
      Request(Input("FP64", "[1152921504606846976]", "[]")),
      Request(Input("FP32", "[4611686018427387904]", "[]")),
      Request(Input("FP32", "[1000000000000]", "[1, 2]")),
      Request(Input("FP32", "[1]", "[1]", "")),
      Request(R"({"name": "x", "datatype": "FP32", "shape": [1], "data": [1], "dat": 1})"),
      Request(R"({"name": "x", "datatype": "FP32", "shape": [1], "data": [1], "data": [2]})"),
      Request(R"({"name": "x", "datatype": "FP32", "shape": [1]})"),
      Request(R"({"name": "x", "shape": [1], "data": [1]})"),
      Request(R"({"name": "x", "datatype": "FP32", "shape": [1], "data": [1],
                  "parameters": {"binary_data_size": 4}})"),
      Request(R"({"name": "x", "datatype": "FP32", "shape": [1],
                  "parameters": {"binary_data_size": 5}})"),
      Request(R"({"name": "x", "datatype": "FP32", "shape": [1],
                  "parameters": {"shared_memory_region": "r"}})"),
      Request(R"({"name": "x", "datatype": "FP32", "shape": [1],
                  "parameters": {"shared_memory_byte_size": 4}})"),
      Request(R"({"name": "x", "datatype": "FP32", "shape": [1],
                  "parameters": {"shared_memory_region": "", "shared_memory_byte_size": 4}})"),
      Request(R"({"name": "x", "datatype": "FP32", "shape": [1],
                  "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 0}})"),
      Request(R"({"name": "x", "datatype": "FP32", "shape": [1], "data": [1],
                  "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 4}})"),
      Request(x, R"(, "parameters": {"timeout": -1})"),
      Request(x, R"(, "parameters": {"timeout": 1.5})"),
      Request(x, R"(, "parameters": {"timeout": 4611686018427387905})"),
      Request(x, R"(, "parameters": {"priority": 18446744073709551616})"),
      Request(x, R"(, "parameters": {"binary_data_output": 1})"),
      Request(x, R"(, "parameters": {"client_weight": 0.009})"),
      Request(x, R"(, "parameters": {"client_weight": 1e400})"),
      Request(x, R"(, "parameters": {"timeout": 1, "timeout": 2})"),
      Request(x, R"(, "parameters": [])"),
      Request(x, R"(, "outputs": {})"),
      Request(x, R"(, "outputs": [{"name": "y"}, {"name": "y"}])"),
      Request(x, R"(, "outputs": [{"nam": "y"}])"),
      Request(x, R"(, "outputs": ["y"])"),
      Request(x, R"(, "outputs": [{"name": "y", "parameters": {"classification": 0}}])"),
      Request(x, R"(, "outputs": [{"name": "y", "parameters": {"classification": -0}}])"),
      Request(x, R"(, "outputs": [{"name": "y", "parameters": {"classification": 2.5}}])"),
      Request(x, R"(, "outputs": [{"name": "y", "parameters": {"classification": 1073741825}}])"),
      Request(x, R"(, "outputs": [{"name": "y", "parameters": {"binary_data": 1}}])"),
      Request(x, R"(, "outputs": [{"name": "y", "parameters": {"classification": 2,
                  "shared_memory_region": "r", "shared_memory_byte_size": 4}}])"),
      Request(x, R"(, "ignored": 1e99999)"),
      Request(x, R"(, "ignored": "\q")"),
      std::string(40, '[') + std::string(40, ']'),
      Request(x, ", \"deep\": " + std::string(31, '[') + std::string(31, ']')),
      Request(x, ", \"deep\": " + std::string(29, '[') + std::string(29, ']')),
      Request(Input("FP32", "[1]", std::string(29, '[') + "1" + std::string(29, ']'))),
      Request(Input("FP32", "[1]", std::string(30, '[') + "1" + std::string(30, ']'))),
      Request(x, ", \"big\": \"" + std::string(10 << 20, 'a') + "\""),
      R"({"inputs": [)" + x + std::string("]}\0", 3)};
  for (const std::string& text : hostile) ExpectSafe(text);
}

// Every prefix and a few single-byte changes of good requests: the fast path never takes what the
// DOM path refuses, nor reads anything differently.
TEST(V2RequestScannerTest, TruncatedAndMutatedRequestsAreSafe) {
  const std::string good =
      Request(Input("FP16", "[2, 2]", "[[1.5, -2e-3], [65504, 0]]") + ", " +
                  Input("INT16", "[1]", "[-7]", "y"),
              R"(, "id": "r", "parameters": {"timeout": 10, "client_weight": 2},
         "outputs": [{"name": "z", "parameters": {"classification": 2}}])");
  ExpectSame(good);
  for (size_t size = 0; size < good.size(); ++size) ExpectSafe(good.substr(0, size));
  for (size_t at = 0; at < good.size(); ++at) {
    for (char c : {'"', '1', '-', '[', '}', ' ', 'e', '\\'}) {
      std::string mutated = good;
      mutated[at] = c;
      ExpectSafe(mutated);
    }
  }
}

// Seeded random floats of every floating datatype, printed in several forms: the fast path reads
// each to the same bits as the DOM path.
TEST(V2RequestScannerTest, RandomNumbersReadToTheSameBits) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 random(seed);
  const char* formats[] = {"%.17g", "%.9g", "%.3e", "%.1f", "%.25g", "%.19g", "%.18e"};
  for (const char* datatype : {"FP32", "FP64", "FP16", "BF16"}) {
    for (int round = 0; round < 20; ++round) {
      std::string data = "[";
      const int count = 64;
      for (int i = 0; i < count; ++i) {
        uint64_t bits = random();
        double value;
        std::memcpy(&value, &bits, sizeof(value));
        const int scale = static_cast<int>(random() % 80) - 40;
        int exponent = 0;
        value = std::isfinite(value) ? std::ldexp(std::frexp(value, &exponent), scale) : 0.5;
        if (std::string(datatype) == "FP16") value = std::fmod(value, 65000.0);
        char text[64];
        std::snprintf(text, sizeof(text), formats[random() % 7], value);
        data += (i ? "," : "") + std::string(text);
      }
      data += "]";
      ExpectSame(Request(Input(datatype, "[" + std::to_string(count) + "]", data)));
    }
  }
}

TEST(V2RequestScannerTest, ParseV2InferRequestTakesTheFastPathAndFallsBack) {
  const std::string good = Request(Input("FP32", "[2]", "[1, 2]"));
  auto body = std::make_shared<const std::string>(good);
  V2InferRequest request;
  EXPECT_TRUE(ParseV2InferRequestFast(body, good.size(), &request));
  // An escaped key is valid JSON the fast path leaves alone: the DOM path still takes it.
  const std::string escaped = R"({"inputs": [{"n\u0061me": "x", "datatype": "FP32", "shape": [1],
                                  "data": [1]}]})";
  body = std::make_shared<const std::string>(escaped);
  EXPECT_FALSE(ParseV2InferRequestFast(body, escaped.size(), &request));
  V2InferRequest parsed;
  ASSERT_TRUE(ParseV2InferRequest(body, escaped.size(), &parsed).ok());
  EXPECT_EQ(parsed.inputs.at(0).name, "x");
}

}  // namespace
}  // namespace torchfarm
