// v2_http_codec: infer request bodies (JSON and binary), responses, metadata and error bodies.
#include "supervisor/frontend/v2_http_codec.h"

#include <gtest/gtest.h>

#include <cstring>

#include "supervisor/frontend/v2_json_data.h"

namespace torchfarm {
namespace {

using nlohmann::json;

Status Parse(const std::string& body, V2InferRequest* out, size_t json_bytes = std::string::npos) {
  auto shared = std::make_shared<const std::string>(body);
  return ParseV2InferRequest(shared, json_bytes == std::string::npos ? body.size() : json_bytes,
                             out);
}

std::string ParseError(const std::string& body) {
  V2InferRequest request;
  Status s = Parse(body, &request);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << body;
  return s.message();
}

// A body with a JSON part and binary tensors after it.
std::string BinaryBody(const json& header, const std::string& binary, size_t* json_bytes) {
  std::string text = header.dump();
  *json_bytes = text.size();
  return text + binary;
}

// KServe's REST client always sends "model_name" (and may send "model_version"): ignored, as
// Triton and KServe do, while the keys the farm uses keep their checks (issue 30 item 2).
TEST(V2HttpCodecTest, UnknownTopLevelKeysAreIgnoredAndKnownOnesKeepTheirTypes) {
  const std::string input = R"({"name": "x", "datatype": "FP32", "shape": [1], "data": [1]})";
  V2InferRequest request;
  Status s = Parse(R"({"model_name": "mlp", "model_version": "1", "whatever": [1, {"a": 2}],
                       "inputs": [)" +
                       input + "]}",
                   &request);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(request.inputs.size(), 1u);
  EXPECT_EQ(request.inputs[0].name, "x");
  EXPECT_EQ(ParseError(R"({"model_name": "mlp", "id": 7, "inputs": [)" + input + "]}"),
            "id: expected a string, got number 7");
  EXPECT_EQ(ParseError(R"({"model_name": "mlp", "parameters": 1, "inputs": [)" + input + "]}"),
            "parameters: expected an object, got number 1");
  EXPECT_EQ(ParseError(R"({"model_name": "mlp", "outputs": 1, "inputs": [)" + input + "]}"),
            "outputs: expected an array of {\"name\"}, got number 1");
  // Triton priorities are any uint64; past the wire's range they mean "the default level" (0).
  s = Parse(R"({"parameters": {"priority": 18446744073709551615}, "inputs": [)" + input + "]}",
            &request);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(request.priority, 0);
}

// parameters.client_weight (issue 32): a number 0.01..100, at both limits and one step past each.
TEST(V2HttpCodecTest, ClientWeightIsANumberWithinItsLimits) {
  const std::string input = R"({"name": "x", "datatype": "FP32", "shape": [1], "data": [1]})";
  V2InferRequest request;
  for (const char* weight : {"0.01", "100", "2", "0.5"}) {
    Status s = Parse(std::string(R"({"parameters": {"client_weight": )") + weight +
                         R"(}, "inputs": [)" + input + "]}",
                     &request);
    ASSERT_TRUE(s.ok()) << weight << ": " << s.message();
    EXPECT_EQ(request.client_weight, std::stod(weight));
  }
  const std::string one = "\"inputs\": [" + input + "]";
  EXPECT_EQ(ParseError("{" + one + ", \"parameters\": {\"client_weight\": 0.009}}"),
            "parameters.client_weight: expected a number in 0.01..100 (a client weight), got "
            "number 0.009");
  EXPECT_EQ(ParseError("{" + one + ", \"parameters\": {\"client_weight\": 100.5}}"),
            "parameters.client_weight: expected a number in 0.01..100 (a client weight), got "
            "number 100.5");
  EXPECT_EQ(ParseError("{" + one + ", \"parameters\": {\"client_weight\": \"2\"}}"),
            "parameters.client_weight: expected a number in 0.01..100 (a client weight), got "
            "string \"2\"");
}

TEST(V2HttpCodecTest, ParsesAJsonRequestOfEveryDatatype) {
  const json body = json::parse(R"({"id": "req-1",
    "parameters": {"timeout": 1500, "priority": 2, "binary_data_output": true},
    "inputs": [
      {"name": "f32", "datatype": "FP32", "shape": [2], "data": [1.5, -2]},
      {"name": "f64", "datatype": "FP64", "shape": [1], "data": [0.1]},
      {"name": "f16", "datatype": "FP16", "shape": [1], "data": [1.0]},
      {"name": "bf16", "datatype": "BF16", "shape": [1], "data": [1.0]},
      {"name": "i64", "datatype": "INT64", "shape": [1], "data": [-5]},
      {"name": "i32", "datatype": "INT32", "shape": [1], "data": [7]},
      {"name": "i16", "datatype": "INT16", "shape": [1], "data": [-300]},
      {"name": "i8", "datatype": "INT8", "shape": [1], "data": [-1]},
      {"name": "u8", "datatype": "UINT8", "shape": [1], "data": [200]},
      {"name": "b", "datatype": "BOOL", "shape": [2], "data": [true, false]}],
    "outputs": [{"name": "y", "parameters": {"binary_data": true}}, {"name": "z"}]})");
  V2InferRequest request;
  ASSERT_TRUE(Parse(body.dump(), &request).ok()) << Parse(body.dump(), &request).message();
  EXPECT_EQ(request.id, "req-1");
  EXPECT_EQ(request.timeout_ms, 2);  // 1500 µs rounds up
  EXPECT_EQ(request.priority, 2);
  EXPECT_TRUE(request.binary_outputs);
  ASSERT_EQ(request.inputs.size(), 10u);
  float f32[2];
  std::memcpy(f32, request.inputs[0].data.data(), 8);
  EXPECT_EQ(f32[0], 1.5f);
  EXPECT_EQ(f32[1], -2.0f);
  double f64;
  std::memcpy(&f64, request.inputs[1].data.data(), 8);
  EXPECT_EQ(f64, 0.1);
  uint16_t half, bf16;
  std::memcpy(&half, request.inputs[2].data.data(), 2);
  std::memcpy(&bf16, request.inputs[3].data.data(), 2);
  EXPECT_EQ(half, 0x3c00);
  EXPECT_EQ(bf16, 0x3f80);
  int64_t i64;
  std::memcpy(&i64, request.inputs[4].data.data(), 8);
  EXPECT_EQ(i64, -5);
  int16_t i16;
  std::memcpy(&i16, request.inputs[6].data.data(), 2);
  EXPECT_EQ(i16, -300);
  EXPECT_EQ(static_cast<const uint8_t*>(request.inputs[8].data.data())[0], 200);
  EXPECT_EQ(request.inputs[9].data.to_string(), std::string("\x01\x00", 2));
  EXPECT_EQ(request.inputs[9].datatype, "BOOL");
  EXPECT_EQ(request.inputs[0].shape, (std::vector<int64_t>{2}));
  ASSERT_EQ(request.outputs.size(), 2u);
  EXPECT_EQ(request.outputs[0].name, "y");
  EXPECT_TRUE(request.outputs[0].binary);
  EXPECT_FALSE(request.outputs[1].binary);
}

// A number beyond a double's range is nlohmann's out_of_range, not a parse_error: it must come
// back as INVALID_ARGUMENT, never escape (found by v2_http_fuzzer).
TEST(V2HttpCodecTest, ANumberTooLargeForADoubleIsInvalidJson) {
  EXPECT_NE(ParseError(R"({"inputs": 1e99999})").find("number overflow"), std::string::npos);
  EXPECT_NE(ParseError(R"({"id": "x", "inputs": [{"data": [1E55555555]}]})").find(
                "got invalid JSON"),
            std::string::npos);
}

TEST(V2HttpCodecTest, ParsesBinaryInputsWithoutCopyingThem) {
  json header = json::parse(R"({"inputs": [
      {"name": "a", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}},
      {"name": "b", "datatype": "INT8", "shape": [3], "data": [1, 2, 3]},
      {"name": "c", "datatype": "UINT8", "shape": [2, 2], "parameters": {"binary_data_size": 4}}]})");
  std::string binary(12, '\0');
  const float a[2] = {3.25f, -1.0f};
  std::memcpy(binary.data(), a, 8);
  std::memcpy(binary.data() + 8, "wxyz", 4);
  size_t json_bytes;
  auto body = std::make_shared<const std::string>(BinaryBody(header, binary, &json_bytes));
  V2InferRequest request;
  ASSERT_TRUE(ParseV2InferRequest(body, json_bytes, &request).ok());
  ASSERT_EQ(request.inputs.size(), 3u);
  EXPECT_EQ(request.inputs[0].data.data(), body->data() + json_bytes);  // zero-copy
  EXPECT_EQ(std::memcmp(request.inputs[0].data.data(), a, 8), 0);
  EXPECT_EQ(request.inputs[1].data.to_string(), "\x01\x02\x03");
  EXPECT_EQ(request.inputs[2].data.to_string(), "wxyz");
  std::weak_ptr<const std::string> weak = body;
  body.reset();
  EXPECT_FALSE(weak.expired());  // the messages keep the body alive
  request.inputs.clear();
  EXPECT_TRUE(weak.expired());
}

TEST(V2HttpCodecTest, BinaryErrorsNameSizes) {
  json header = json::parse(R"({"inputs": [
      {"name": "a", "datatype": "FP32", "shape": [2, 3], "parameters": {"binary_data_size": 20}}]})");
  size_t json_bytes;
  std::string body = BinaryBody(header, std::string(20, 'x'), &json_bytes);
  V2InferRequest request;
  EXPECT_EQ(Parse(body, &request, json_bytes).message(),
            "inputs[0]: FP32 [2, 3] needs 24 bytes, parameters.binary_data_size is 20");

  header["inputs"][0]["parameters"]["binary_data_size"] = 24;
  body = BinaryBody(header, std::string(20, 'x'), &json_bytes);
  EXPECT_EQ(Parse(body, &request, json_bytes).message(),
            "inputs[0]: parameters.binary_data_size is 24 but only 20 bytes of binary data are "
            "left in the body");

  body = BinaryBody(header, std::string(30, 'x'), &json_bytes);
  EXPECT_EQ(Parse(body, &request, json_bytes).message(),
            "request body: the inputs' binary_data_size add up to 24 bytes, but 30 bytes follow "
            "the JSON part");

  header["inputs"][0]["data"] = json::array({1, 2, 3, 4, 5, 6});
  body = BinaryBody(header, std::string(24, 'x'), &json_bytes);
  EXPECT_EQ(Parse(body, &request, json_bytes).message(),
            "inputs[0]: expected either \"data\" or parameters.binary_data_size, got both");

  EXPECT_EQ(Parse("{}", &request, 5).message(),
            "request body: the JSON part is 5 bytes but the body holds only 2");
}

// 2^60 FP64 elements pass the element limit but not the byte limit: the byte count was read from
// an empty optional (undefined; a garbage size could match binary_data_size).
TEST(V2HttpCodecTest, AShapeOfTooManyBytesIsRefused) {
  for (const char* data : {R"("parameters": {"binary_data_size": 0})", R"("data": [])"}) {
    const std::string body = std::string(R"({"inputs": [{"name": "x", "datatype": "FP64", )") +
                             R"("shape": [1152921504606846976], )" + data + "}]}";
    EXPECT_EQ(ParseError(body),
              "inputs[0].shape: FP64 [1152921504606846976] is 2^62 bytes or more");
  }
}

TEST(V2HttpCodecTest, InferenceHeaderContentLength) {
  size_t n = 0;
  EXPECT_TRUE(ParseInferenceHeaderLength("12", 20, &n).ok());
  EXPECT_EQ(n, 12u);
  EXPECT_TRUE(ParseInferenceHeaderLength("20", 20, &n).ok());
  EXPECT_EQ(ParseInferenceHeaderLength("21", 20, &n).message(),
            "Inference-Header-Content-Length: expected an integer 0..20 (the body's size), got "
            "'21'");
  EXPECT_FALSE(ParseInferenceHeaderLength("", 20, &n).ok());
  EXPECT_FALSE(ParseInferenceHeaderLength("-1", 20, &n).ok());
  EXPECT_FALSE(ParseInferenceHeaderLength("1x", 20, &n).ok());
  EXPECT_FALSE(ParseInferenceHeaderLength("99999999999999999999999", 20, &n).ok());
}

TEST(V2HttpCodecTest, EveryRequestErrorSaysWhatWasExpectedAndWhatCame) {
  const std::string ok_input = R"({"name": "x", "datatype": "FP32", "shape": [1], "data": [1]})";
  auto with_input = [](const std::string& input) { return "{\"inputs\": [" + input + "]}"; };
  EXPECT_NE(ParseError("{\"inputs\": [").find("request body: expected a JSON object, got invalid "
                                              "JSON (parse error at line 1, column 13"),
            std::string::npos);
  EXPECT_EQ(ParseError("[1]"), "request body: expected a JSON object, got array [1]");
  EXPECT_EQ(ParseError(std::string(40, '[') + std::string(40, ']')),
            "request body: expected JSON nested at most 32 levels deep, got deeper");
  // Unknown top-level keys are ignored, as Triton and KServe do; the inputs are still required.
  EXPECT_EQ(ParseError("{\"input\": []}"),
            "inputs: expected a non-empty array of tensors, got nothing");
  EXPECT_EQ(ParseError("{}"), "inputs: expected a non-empty array of tensors, got nothing");
  EXPECT_EQ(ParseError("{\"inputs\": []}"), "inputs: expected a non-empty array of tensors, got "
                                             "array []");
  EXPECT_EQ(ParseError("{\"id\": 5, \"inputs\": [" + ok_input + "]}"),
            "id: expected a string, got number 5");
  EXPECT_EQ(ParseError(with_input("3")), "inputs[0]: expected an object {\"name\", \"shape\", "
                                         "\"datatype\", \"data\"}, got number 3");
  EXPECT_EQ(ParseError(with_input(R"({"datatype": "FP32", "shape": [1], "data": [1]})")),
            "inputs[0].name: expected a non-empty string, got nothing");
  EXPECT_EQ(ParseError(with_input(R"({"name": "x", "shape": [1], "data": [1]})")),
            "inputs[0].datatype: expected a non-empty string, got nothing");
  EXPECT_NE(ParseError(with_input(R"({"name": "x", "datatype": "BYTES", "shape": [1]})"))
                .find("inputs[0].datatype: datatype BYTES (strings) is not supported"),
            std::string::npos);
  EXPECT_NE(ParseError(with_input(R"({"name": "x", "datatype": "F32", "shape": [1]})"))
                .find("inputs[0].datatype: datatype 'F32' is not one of FP32"),
            std::string::npos);
  EXPECT_EQ(ParseError(with_input(R"({"name": "x", "datatype": "FP32", "data": [1]})")),
            "inputs[0].shape: expected an array of integers >= 0, got nothing");
  EXPECT_EQ(ParseError(with_input(R"({"name": "x", "datatype": "FP32", "shape": [-1]})")),
            "inputs[0].shape[0]: expected an integer 0..4611686018427387904, got number -1");
  EXPECT_EQ(ParseError(with_input(
                R"({"name": "x", "datatype": "FP32", "shape": [1,1,1,1,1,1,1,1,1], "data": [1]})")),
            "inputs[0].shape: expected at most 8 dimensions, got 9");
  EXPECT_EQ(ParseError(with_input(R"({"name": "x", "datatype": "FP32", "shape": [2, 3],
                                      "data": [1, 2, 3, 4, 5]})")),
            "inputs[0].data: expected 6 FP32 values for shape [2, 3], got 5");
  EXPECT_EQ(ParseError(with_input(R"({"name": "x", "datatype": "FP32", "shape": [1]})")),
            "inputs[0]: expected \"data\" or parameters.binary_data_size, got neither");
  EXPECT_EQ(ParseError(with_input(R"({"name": "x", "datatype": "FP32", "shape": [1], "dat": 1})")),
            "inputs[0]: unknown key 'dat'; expected name, shape, datatype, data, parameters");
  EXPECT_EQ(ParseError(with_input(R"({"name": "x", "datatype": "FP32", "shape": [1],
                                      "parameters": {"binary_data_size": -4}})")),
            "inputs[0].parameters.binary_data_size: expected an integer 0..4611686018427387904, "
            "got number -4");
  EXPECT_EQ(ParseError(with_input(R"({"name": "x", "datatype": "FP32", "shape": [1],
                                      "parameters": {"shared_memory_region": "r"}})")),
            "inputs[0].parameters.shared_memory_byte_size: expected an integer 1..2^62 with "
            "shared_memory_region, got nothing");
  EXPECT_EQ(ParseError(with_input(R"({"name": "x", "datatype": "FP32", "shape": [1],
                                      "parameters": 3})")),
            "inputs[0].parameters: expected an object, got number 3");
  const std::string one = "\"inputs\": [" + ok_input + "]";
  EXPECT_EQ(ParseError("{" + one + ", \"parameters\": {\"timeout\": \"1s\"}}"),
            "parameters.timeout (microseconds): expected an integer 0..4611686018427387904, got "
            "string \"1s\"");
  EXPECT_EQ(ParseError("{" + one + ", \"parameters\": {\"priority\": -1}}"),
            "parameters.priority: expected an integer 0..18446744073709551615, got number -1");
  EXPECT_EQ(ParseError("{" + one + ", \"parameters\": {\"priority\": \"high\"}}"),
            "parameters.priority: expected an integer 0..18446744073709551615, got string "
            "\"high\"");
  EXPECT_EQ(ParseError("{" + one + ", \"parameters\": {\"binary_data_output\": 1}}"),
            "parameters.binary_data_output: expected true or false, got number 1");
  EXPECT_EQ(ParseError("{" + one + ", \"parameters\": []}"),
            "parameters: expected an object, got array []");
  EXPECT_EQ(ParseError("{" + one + ", \"outputs\": {}}"),
            "outputs: expected an array of {\"name\"}, got object {}");
  EXPECT_EQ(ParseError("{" + one + ", \"outputs\": [\"y\"]}"),
            "outputs[0]: expected an object {\"name\"}, got string \"y\"");
  EXPECT_EQ(ParseError("{" + one + ", \"outputs\": [{\"name\": \"y\"}, {\"name\": \"y\"}]}"),
            "outputs[1].name: 'y' is requested twice");
  EXPECT_EQ(ParseError("{" + one + ", \"outputs\": [{\"nam\": \"y\"}]}"),
            "outputs[0]: unknown key 'nam'; expected name, parameters");
  EXPECT_EQ(ParseError("{" + one +
                       ", \"outputs\": [{\"name\": \"y\", \"parameters\": {\"binary_data\": 1}}]}"),
            "outputs[0].parameters.binary_data: expected true or false, got number 1");
  // Classification (issue 30): a class count in 1..2^30, nothing else.
  for (const char* count :
       {"0", "-1", "\"3\"", "2.5", "1099511627776", "18446744073709551615", "null", "[3]"}) {
    EXPECT_NE(ParseError("{" + one +
                         ", \"outputs\": [{\"name\": \"y\", \"parameters\": "
                         "{\"classification\": " +
                         count + "}}]}")
                  .find("outputs[0].parameters.classification: expected a class count in 1.."),
              std::string::npos)
        << count;
  }
}

V2Tensor Output(const std::string& name, const std::string& datatype, std::vector<int64_t> shape,
                const void* bytes, size_t size) {
  V2Tensor t;
  t.name = name;
  t.datatype = datatype;
  t.shape = std::move(shape);
  t.data = zmq::message_t(bytes, size);
  return t;
}

TEST(V2HttpCodecTest, WritesAJsonResponse) {
  V2InferResponse response;
  response.model = "m";
  response.version = "1";
  response.id = "r";
  const float y[] = {0.1f, -3.0f, 1e-45f};
  const uint16_t h[] = {FloatToHalf(0.333f)};
  response.outputs.push_back(Output("y", "FP32", {3}, y, sizeof(y)));
  response.outputs.push_back(Output("h", "FP16", {1, 1}, h, sizeof(h)));
  response.binary = {false, false};
  V2HttpBody body = WriteV2InferResponse(response);
  EXPECT_FALSE(body.json_bytes.has_value());
  json j = json::parse(body.bytes);
  EXPECT_EQ(j["model_name"], "m");
  EXPECT_EQ(j["model_version"], "1");
  EXPECT_EQ(j["id"], "r");
  EXPECT_EQ(j["outputs"][0]["name"], "y");
  EXPECT_EQ(j["outputs"][0]["datatype"], "FP32");
  EXPECT_EQ(j["outputs"][0]["shape"], json::array({3}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(j["outputs"][0]["data"][i].get<float>(), y[i]);
  EXPECT_EQ(FloatToHalf(j["outputs"][1]["data"][0].get<float>()), h[0]);
  EXPECT_EQ(j["outputs"][1]["shape"], json::array({1, 1}));

  response.id.clear();
  EXPECT_FALSE(json::parse(WriteV2InferResponse(response).bytes).contains("id"));
}

TEST(V2HttpCodecTest, WritesBinaryOutputsAfterTheJson) {
  V2InferResponse response;
  response.model = "m";
  response.version = "1";
  const int32_t a[] = {1, 2};
  const uint8_t b[] = {9, 8, 7};
  response.outputs.push_back(Output("a", "INT32", {2}, a, sizeof(a)));
  response.outputs.push_back(Output("b", "UINT8", {3}, b, sizeof(b)));
  response.outputs.push_back(Output("c", "UINT8", {3}, b, sizeof(b)));
  response.binary = {true, false, true};
  V2HttpBody body = WriteV2InferResponse(response);
  ASSERT_TRUE(body.json_bytes.has_value());
  json j = json::parse(body.bytes.substr(0, *body.json_bytes));
  EXPECT_EQ(j["outputs"][0]["parameters"]["binary_data_size"], 8);
  EXPECT_FALSE(j["outputs"][0].contains("data"));
  EXPECT_EQ(j["outputs"][1]["data"], json::array({9, 8, 7}));
  EXPECT_EQ(j["outputs"][2]["parameters"]["binary_data_size"], 3);
  const std::string binary = body.bytes.substr(*body.json_bytes);
  ASSERT_EQ(binary.size(), 11u);
  EXPECT_EQ(std::memcmp(binary.data(), a, 8), 0);
  EXPECT_EQ(binary.substr(8), "\x09\x08\x07");
}

TEST(V2HttpCodecTest, MetadataAndErrorBodies) {
  EXPECT_EQ(json::parse(V2ErrorBody("bad \"thing\"")), json({{"error", "bad \"thing\""}}));
  EXPECT_EQ(json::parse(V2ErrorBody("\xff")).at("error"), "\xef\xbf\xbd");  // replaced, no throw
  json server = json::parse(V2ServerMetadataBody());
  EXPECT_EQ(server["name"], "torchfarm");
  EXPECT_TRUE(server["version"].is_string());
  EXPECT_EQ(server["extensions"],
            json::array({"binary_tensor_data", "model_configuration", "statistics",
                         "model_repository", "classification", "logging"}));
  json model = json::parse(R"({"name": "m", "versions": ["1"], "platform": "pytorch_libtorch",
      "ready": true, "inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 4]}],
      "outputs": []})");
  json meta = json::parse(V2ModelMetadataBody(model));
  model.erase("ready");
  EXPECT_EQ(meta, model);
}

}  // namespace
}  // namespace torchfarm
