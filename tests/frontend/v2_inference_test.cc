// v2_inference: datatype names, v2 request -> farm frames, farm reply -> v2 response.
#include "supervisor/frontend/v2_inference.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>

#include "common/request_header_check.h"

namespace torchfarm {
namespace {

using nlohmann::json;

V2Tensor Tensor(const std::string& name, const std::string& datatype, std::vector<int64_t> shape,
                size_t bytes) {
  V2Tensor t;
  t.name = name;
  t.datatype = datatype;
  t.shape = std::move(shape);
  t.data = zmq::message_t(bytes);
  std::memset(t.data.data(), 0x5a, bytes);
  return t;
}

ReplyHeader Reply(const std::string& text) {
  ReplyHeader reply;
  EXPECT_TRUE(ParseReplyHeader(text, &reply).ok()) << text;
  return reply;
}

std::vector<zmq::message_t> Frames(std::vector<std::string> contents) {
  std::vector<zmq::message_t> frames;
  for (const auto& c : contents) frames.emplace_back(c.data(), c.size());
  return frames;
}

TEST(V2InferenceTest, MapsEveryDatatypeBothWays) {
  const std::pair<const char*, DType> pairs[] = {
      {"FP32", DType::kFloat32}, {"FP16", DType::kFloat16}, {"BF16", DType::kBFloat16},
      {"FP64", DType::kFloat64}, {"INT64", DType::kInt64},  {"INT32", DType::kInt32},
      {"INT16", DType::kInt16},  {"INT8", DType::kInt8},    {"UINT8", DType::kUInt8},
      {"BOOL", DType::kBool}};
  for (const auto& [name, dtype] : pairs) {
    DType got;
    ASSERT_TRUE(DTypeFromV2(name, "x", &got).ok()) << name;
    EXPECT_EQ(got, dtype);
    EXPECT_EQ(V2DatatypeName(dtype), name);
  }
  DType got;
  Status s = DTypeFromV2("BYTES", "inputs[0].datatype", &got);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("inputs[0].datatype: datatype BYTES (strings) is not supported"),
            std::string::npos) << s.message();
  s = DTypeFromV2("FP33", "inputs[1] ('x')", &got);
  EXPECT_EQ(s.message(), "inputs[1] ('x'): datatype 'FP33' is not one of FP32, FP64, FP16, BF16, "
                         "INT64, INT32, INT16, INT8, UINT8, BOOL");
}

TEST(V2InferenceTest, ToFarmRequestBuildsTheWireHeaderAndMovesTheFrames) {
  V2InferRequest request;
  request.model = "m";
  request.timeout_ms = 250;
  request.priority = 3;
  request.inputs.push_back(Tensor("b", "FP32", {2, 32}, 256));  // not inline in the message
  request.inputs.push_back(Tensor("a", "INT8", {4}, 4));
  const void* first = request.inputs[0].data.data();
  json header;
  std::vector<zmq::message_t> frames;
  ASSERT_TRUE(ToFarmRequest(request, RequestLimits{}, &header, &frames).ok());
  EXPECT_EQ(header, json::parse(R"({"v": 1, "model": "m", "timeout_ms": 250, "priority": 3,
      "inputs": [{"name": "b", "dtype": "float32", "shape": [2, 32]},
                 {"name": "a", "dtype": "int8", "shape": [4]}]})"));
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].data(), first);  // moved, not copied
  EXPECT_EQ(frames[1].size(), 4u);
}

TEST(V2InferenceTest, ToFarmRequestOmitsDefaults) {
  V2InferRequest request;
  request.model = "m";
  request.inputs.push_back(Tensor("x", "BOOL", {}, 1));
  json header;
  std::vector<zmq::message_t> frames;
  ASSERT_TRUE(ToFarmRequest(request, RequestLimits{}, &header, &frames).ok());
  EXPECT_FALSE(header.contains("timeout_ms"));
  EXPECT_FALSE(header.contains("priority"));
  EXPECT_FALSE(header.contains("client_weight"));
  EXPECT_EQ(header["inputs"][0]["dtype"], "bool");
  V2InferRequest weighted;  // parameters.client_weight: the farm header carries it on
  weighted.model = "m";
  weighted.client_weight = 0.25;
  weighted.inputs.push_back(Tensor("x", "BOOL", {}, 1));
  ASSERT_TRUE(ToFarmRequest(weighted, RequestLimits{}, &header, &frames).ok());
  EXPECT_EQ(header["client_weight"], 0.25);
}

TEST(V2InferenceTest, ToFarmRequestErrorsNameTheInput) {
  json header;
  std::vector<zmq::message_t> frames;
  V2InferRequest empty;
  EXPECT_EQ(ToFarmRequest(empty, RequestLimits{}, &header, &frames).message(),
            "inputs: expected at least one input, got 0");

  V2InferRequest twice;
  twice.inputs.push_back(Tensor("x", "FP32", {1}, 4));
  twice.inputs.push_back(Tensor("x", "FP32", {1}, 4));
  EXPECT_NE(ToFarmRequest(twice, RequestLimits{}, &header, &frames)
                .message()
                .find("inputs[1] ('x'): the name is "
                      "used by an earlier input"),
            std::string::npos);

  V2InferRequest short_data;
  short_data.inputs.push_back(Tensor("x", "FP32", {2, 3}, 20));
  EXPECT_EQ(ToFarmRequest(short_data, RequestLimits{}, &header, &frames).message(),
            "inputs[0] ('x'): FP32 [2, 3] needs 24 bytes, got 20");

  V2InferRequest bad_type;
  bad_type.inputs.push_back(Tensor("x", "FP33", {1}, 4));
  EXPECT_NE(ToFarmRequest(bad_type, RequestLimits{}, &header, &frames)
                .message()
                .find("inputs[0] ('x'): datatype 'FP33' is not one of FP32"),
            std::string::npos);

  V2InferRequest deep;
  deep.inputs.push_back(Tensor("x", "UINT8", {1, 1, 1, 1, 1, 1, 1, 1, 1}, 1));
  EXPECT_NE(ToFarmRequest(deep, RequestLimits{}, &header, &frames)
                .message()
                .find("rank 9; the most is 8"),
            std::string::npos);

  // Every transport: a repeated output would be copied once per repeat (FromFarmReply).
  V2InferRequest repeated;
  repeated.inputs.push_back(Tensor("x", "UINT8", {1}, 1));
  repeated.outputs = {{"y", false}, {"z", false}, {"y", true}};
  EXPECT_EQ(ToFarmRequest(repeated, RequestLimits{}, &header, &frames).message(),
            "outputs[2].name: 'y' is requested twice");

  V2InferRequest unnamed;
  unnamed.inputs.push_back(Tensor("", "UINT8", {1}, 1));
  EXPECT_EQ(ToFarmRequest(unnamed, RequestLimits{}, &header, &frames).message(),
            "inputs[0].name: expected a non-empty name");
}

// Issue 35 item 1: what the loop would refuse for its header limits is refused here, at once,
// naming the limit, the value and where the bytes are; just under the limit passes.
TEST(V2InferenceTest, ToFarmRequestRefusesWhatPassesTheLoopsLimitsNamingThem) {
  json header;
  std::vector<zmq::message_t> frames;
  const RequestLimits limits;  // 64 KiB header, 16 inputs: the documented defaults

  V2InferRequest many;
  many.model = "m";
  for (int i = 0; i < 5000; ++i)
    many.inputs.push_back(Tensor("i" + std::to_string(i), "FP32", {1}, 4));
  EXPECT_EQ(ToFarmRequest(many, limits, &header, &frames).message(),
            "inputs: expected at most 16 inputs (limits.max_frames 17 less the header), "
            "got 5000");

  V2InferRequest long_name;
  long_name.model = "m";
  long_name.inputs.push_back(Tensor(std::string(3 << 20, 'n'), "FP32", {1}, 4));
  Status s = ToFarmRequest(long_name, limits, &header, &frames);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("over limits.max_header_bytes (65536): model_name is 1 "
                             "bytes, the 1 input names 3145728 bytes (the longest, inputs[0], "
                             "3145728 bytes)"),
            std::string::npos)
      << s.message().substr(0, 400);

  V2InferRequest long_model;
  long_model.model = std::string(70'000, 'm');
  long_model.inputs.push_back(Tensor("x", "FP32", {1}, 4));
  s = ToFarmRequest(long_model, limits, &header, &frames);
  EXPECT_NE(s.message().find("model_name is 70000 bytes"), std::string::npos)
      << s.message().substr(0, 400);

  // Escapes count as the bytes they become; a name that fits passes.
  V2InferRequest escaped;
  escaped.model = "m";
  escaped.inputs.push_back(Tensor(std::string(20'000, '\x01'), "FP32", {1}, 4));
  EXPECT_EQ(ToFarmRequest(escaped, limits, &header, &frames).code(),
            StatusCode::kInvalidArgument);  // 120,000 bytes as \u0001 escapes
  V2InferRequest fits;
  fits.model = "m";
  fits.inputs.push_back(Tensor(std::string(60'000, 'n'), "FP32", {1}, 4));
  s = ToFarmRequest(fits, limits, &header, &frames);
  EXPECT_TRUE(s.ok()) << s.message().substr(0, 300);
  EXPECT_LE(header.dump().size() + kFarmIdReserveBytes, limits.max_header_bytes);
}

TEST(V2InferenceTest, TritonPrioritiesPastTheWireRangeMeanTheDefault) {
  EXPECT_EQ(V2PriorityToWire(0), 0);
  EXPECT_EQ(V2PriorityToWire(1), 1);
  EXPECT_EQ(V2PriorityToWire(1000), 1000);
  EXPECT_EQ(V2PriorityToWire(1001), 0);
  EXPECT_EQ(V2PriorityToWire(UINT64_MAX), 0);
}

TEST(V2InferenceTest, UnknownModelsAndVersionsAreNamedAsTheLoopNamesThem) {
  const json meta = {{"models",
                      {{{"name", "a"}, {"version", "1"}, {"default", true}},
                       {{"name", "a"}, {"version", "2"}},
                       {{"name", "b"}}}}};
  const json* model = nullptr;
  EXPECT_EQ(FindModelVersionInMeta(meta, "nope", "", &model).message(),
            "model 'nope' is not served here (served: a, b)");
  EXPECT_EQ(FindModelVersionInMeta(meta, "a", "7", &model).message(),
            "model 'a' has no version '7' (loaded versions: 1, 2)");
  const Status s = FindModelVersionInMeta(meta, std::string(70'000, 'x'), "", &model);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_LT(s.message().size(), 300u) << "a hostile name is shortened in the message";
  EXPECT_NE(s.message().find("(70000 bytes)"), std::string::npos) << s.message();
  ASSERT_TRUE(FindModelVersionInMeta(meta, "a", "", &model).ok());
  EXPECT_EQ(model->value("version", ""), "1");
}

TEST(V2InferenceTest, FromFarmReplyNamesOutputsAndFallsBackToTritonNames) {
  V2InferRequest request;
  request.model = "m";
  request.id = "r1";
  ReplyHeader reply = Reply(R"({"v":1,"id":1,"status":"ok","outputs":[
      {"dtype":"float32","shape":[1]},{"dtype":"int8","shape":[2]}],
      "timing_us":{"queue":1,"compute":2,"total":3},"worker":0})");
  V2InferResponse response;
  ASSERT_TRUE(FromFarmReply(request, reply, Frames({"abcd", "ef"}), &response).ok());
  EXPECT_EQ(response.model, "m");
  EXPECT_EQ(response.version, "") << "unpinned: the farm's reply does not say which version ran";
  EXPECT_EQ(response.id, "r1");
  EXPECT_EQ(response.timing.total_us, 3);
  ASSERT_EQ(response.outputs.size(), 2u);
  EXPECT_EQ(response.outputs[0].name, "OUTPUT__0");
  EXPECT_EQ(response.outputs[1].name, "OUTPUT__1");
  EXPECT_EQ(response.outputs[1].datatype, "INT8");
  EXPECT_EQ(response.outputs[1].shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(response.binary, (std::vector<bool>{false, false}));
}

TEST(V2InferenceTest, FromFarmReplySelectsTheRequestedOutputsInOrder) {
  V2InferRequest request;
  request.model = "m";
  request.outputs = {{"z", true}, {"y", false}, {"z", false}};
  ReplyHeader reply = Reply(R"({"v":1,"id":1,"status":"ok","outputs":[
      {"name":"y","dtype":"uint8","shape":[1]},{"name":"z","dtype":"uint8","shape":[2]}]})");
  V2InferResponse response;
  ASSERT_TRUE(FromFarmReply(request, reply, Frames({"Y", "ZZ"}), &response).ok());
  ASSERT_EQ(response.outputs.size(), 3u);
  EXPECT_EQ(response.outputs[0].name, "z");
  EXPECT_EQ(response.outputs[0].data.to_string(), "ZZ");
  EXPECT_EQ(response.outputs[1].name, "y");
  EXPECT_EQ(response.outputs[1].data.to_string(), "Y");
  EXPECT_EQ(response.outputs[2].data.to_string(), "ZZ");
  EXPECT_EQ(response.binary, (std::vector<bool>{true, false, false}));

  request.outputs = {{"w", false}};
  Status s = FromFarmReply(request, reply, Frames({"Y", "ZZ"}), &response);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "outputs[0]: model 'm' has no output 'w'; it returns y, z");
}

TEST(V2InferenceTest, FromFarmReplyBinaryOutputsFlagAppliesToAll) {
  V2InferRequest request;
  request.binary_outputs = true;
  ReplyHeader reply =
      Reply(R"({"v":1,"id":1,"status":"ok","outputs":[{"dtype":"uint8","shape":[1]}]})");
  V2InferResponse response;
  ASSERT_TRUE(FromFarmReply(request, reply, Frames({"a"}), &response).ok());
  EXPECT_EQ(response.binary, (std::vector<bool>{true}));
}

TEST(V2InferenceTest, FromFarmReplyPassesFarmErrorsAndCatchesBrokenReplies) {
  V2InferRequest request;
  V2InferResponse response;
  ReplyHeader error = Reply(
      R"({"v":1,"id":1,"status":"error","code":"RESOURCE_EXHAUSTED","message":"queue full"})");
  Status s = FromFarmReply(request, error, {}, &response);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "queue full");

  ReplyHeader ok =
      Reply(R"({"v":1,"id":1,"status":"ok","outputs":[{"dtype":"float32","shape":[1]}]})");
  EXPECT_EQ(FromFarmReply(request, ok, {}, &response).code(), StatusCode::kInternal);
  EXPECT_EQ(FromFarmReply(request, ok, Frames({"abc"}), &response).code(), StatusCode::kInternal);
}

TEST(V2InferenceTest, HttpStatusOfEveryCode) {
  EXPECT_EQ(HttpStatusOf(StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusOf(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusOf(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusOf(StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusOf(StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusOf(StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(StatusCode::kInternal), 500);
}

// Issue 36: the typed hand-off. ToRequestHeader must give the loop exactly what it read from
// ToFarmRequest's JSON (ParseRequestHeader, after the channel's "id"), field by field, and
// refuse what either refuses with the same status: the front end's own checks in
// ToRequestHeader, the loop's parse checks in CheckRequestHeader.
struct TypedCase {
  const char* what;
  std::function<V2InferRequest()> make;
  RequestLimits limits;
};

V2InferRequest OneInput(std::string model, std::vector<int64_t> shape = {2, 2}) {
  V2InferRequest request;
  request.model = std::move(model);
  size_t items = 1;
  for (int64_t d : shape) items *= static_cast<size_t>(d);
  request.inputs.push_back(Tensor("x", "FP32", std::move(shape), 4 * items));
  return request;
}

V2ShmPlace Place(const std::string& region, uint64_t offset, uint64_t bytes) {
  V2ShmPlace place;
  place.region = region;
  place.offset = offset;
  place.byte_size = bytes;
  return place;
}

std::vector<TypedCase> TypedCases() {
  std::vector<TypedCase> cases;
  auto add = [&](const char* what, std::function<V2InferRequest()> make,
                 RequestLimits limits = RequestLimits{}) {
    cases.push_back(TypedCase{what, std::move(make), limits});
  };
  add("plain", [] { return OneInput("m"); });
  add("scalar", [] { return OneInput("m", {}); });
  add("every option", [] {
    V2InferRequest r = OneInput("resnet-50.v2");
    r.version = "3";
    r.timeout_ms = 250;
    r.priority = 2;
    r.client_weight = 0.5;
    r.inputs.push_back(Tensor("ids:1", "INT64", {1, 3}, 24));
    r.inputs.push_back(Tensor("mask", "UINT8", {3}, 3));
    return r;
  });
  add("bounds", [] {
    V2InferRequest r = OneInput("m");
    r.priority = 1000;
    r.client_weight = 100;
    r.timeout_ms = -5;
    return r;
  });
  add("weight third", [] {
    V2InferRequest r = OneInput("m");
    r.client_weight = 1.0 / 3;
    return r;
  });
  add("weight infinite", [] {
    V2InferRequest r = OneInput("m");
    r.client_weight = std::numeric_limits<double>::infinity();
    return r;
  });
  add("system shm", [] {
    V2InferRequest r = OneInput("m");
    V2Tensor in_shm = Tensor("a", "FP32", {2, 3}, 0);
    in_shm.shm = Place("r", 4, 24);
    r.inputs.insert(r.inputs.begin(), std::move(in_shm));
    V2RequestedOutput y;
    y.name = "y";
    y.shm = Place("o", 12, 24);
    V2RequestedOutput z;
    z.name = "z";
    z.binary = true;
    r.outputs = {std::move(y), std::move(z)};
    return r;
  });
  add("only outputs in shm", [] {
    V2InferRequest r = OneInput("m");
    V2RequestedOutput y;
    y.name = "y";
    y.shm = Place("o", 0, 64);
    r.outputs.push_back(std::move(y));
    return r;
  });
  add("not utf-8", [] {
    return OneInput(
        "m\xff\xfe"
        "del");
  });
  add("utf-8", [] { return OneInput("mod\xc3\xa8le\n"); });
  add("bad version", [] {
    V2InferRequest r = OneInput("m");
    r.version = "a b\xff";
    return r;
  });
  add("name not a tensor name", [] {
    V2InferRequest r = OneInput("m");
    r.inputs[0].name = "caf\xc3\xa9 x";
    return r;
  });
  add("name not utf-8", [] {
    V2InferRequest r = OneInput("m");
    r.inputs[0].name = "x\xc3";
    return r;
  });
  add("priority below", [] {
    V2InferRequest r = OneInput("m");
    r.priority = -1;
    return r;
  });
  add("priority above", [] {
    V2InferRequest r = OneInput("m");
    r.priority = 1001;
    return r;
  });
  add("weight small", [] {
    V2InferRequest r = OneInput("m");
    r.client_weight = 0.001;
    return r;
  });
  add("weight large", [] {
    V2InferRequest r = OneInput("m");
    r.client_weight = 500;
    return r;
  });
  RequestLimits rank4;
  rank4.max_rank = 4;
  add(
      "rank over limits.max_rank",
      [] {
        return OneInput("m", {1, 1, 1, 1, 2});
      },
      rank4);
  add("input shm offset", [] {
    V2InferRequest r = OneInput("m");
    r.inputs[0].data = zmq::message_t();
    r.inputs[0].shm = Place("r", UINT64_MAX, 16);
    return r;
  });
  add("output shm offset", [] {
    V2InferRequest r = OneInput("m");
    V2RequestedOutput y;
    y.name = "y";
    y.shm = Place("o", uint64_t{1} << 63, 8);
    r.outputs.push_back(std::move(y));
    return r;
  });
  add("output shm bytes", [] {
    V2InferRequest r = OneInput("m");
    V2RequestedOutput y;
    y.name = "y";
    y.shm = Place("o", 0, UINT64_MAX);
    r.outputs.push_back(std::move(y));
    return r;
  });
  add("output shm unnamed", [] {
    V2InferRequest r = OneInput("m");
    V2RequestedOutput y;
    y.shm = Place("o", 0, 8);
    r.outputs.push_back(std::move(y));
    return r;
  });
  add("too many outputs in shm", [] {
    V2InferRequest r = OneInput("m");
    for (int i = 0; i < 65; ++i) {
      V2RequestedOutput y;
      y.name = "y" + std::to_string(i);
      y.shm = Place("o", 0, 8);
      r.outputs.push_back(std::move(y));
    }
    return r;
  });
  add("empty model", [] { return OneInput(""); });
  // The front end's own refusals.
  add("huge input name", [] {
    V2InferRequest r = OneInput("m");
    r.inputs[0].name = std::string(3 << 20, 'n');
    return r;
  });
  add("huge model name", [] { return OneInput(std::string(70'000, 'm')); });
  add("escapes over the limit", [] {
    V2InferRequest r = OneInput("m");
    r.inputs[0].name = std::string(20'000, '\x01');
    return r;
  });
  add("just fits", [] {
    V2InferRequest r = OneInput("m");
    r.inputs[0].name = std::string(60'000, 'n');
    return r;
  });
  add("too many inputs", [] {
    V2InferRequest r;
    r.model = "m";
    for (int i = 0; i < 17; ++i)
      r.inputs.push_back(Tensor("i" + std::to_string(i), "FP32", {1}, 4));
    return r;
  });
  add("no inputs", [] {
    V2InferRequest r;
    r.model = "m";
    return r;
  });
  add("duplicate inputs", [] {
    V2InferRequest r = OneInput("m");
    r.inputs.push_back(Tensor("x", "FP32", {1}, 4));
    return r;
  });
  add("duplicate outputs", [] {
    V2InferRequest r = OneInput("m");
    r.outputs.resize(2);
    r.outputs[0].name = r.outputs[1].name = "y";
    return r;
  });
  add("unnamed input", [] {
    V2InferRequest r = OneInput("m");
    r.inputs[0].name.clear();
    return r;
  });
  add("bytes", [] {
    V2InferRequest r = OneInput("m");
    r.inputs[0].datatype = "BYTES";
    return r;
  });
  add("short data", [] {
    V2InferRequest r = OneInput("m");
    r.inputs[0].data = zmq::message_t(3);
    return r;
  });
  add("rank 9", [] { return OneInput("m", {1, 1, 1, 1, 1, 1, 1, 1, 1}); });
  add("negative dimension", [] {
    V2InferRequest r = OneInput("m");
    r.inputs[0].shape = {-1, 4};
    return r;
  });
  add("shm byte size", [] {
    V2InferRequest r = OneInput("m");
    r.inputs[0].data = zmq::message_t();
    r.inputs[0].shm = Place("r", 0, 15);
    return r;
  });
  return cases;
}

void ExpectSameHeader(const RequestHeader& parsed, const RequestHeader& typed) {
  EXPECT_EQ(typed.id, nlohmann::json()) << "the call id is the correlation";
  EXPECT_EQ(typed.op, parsed.op);
  EXPECT_EQ(typed.model, parsed.model);
  EXPECT_EQ(typed.version, parsed.version);
  ASSERT_EQ(typed.inputs.size(), parsed.inputs.size());
  for (size_t i = 0; i < typed.inputs.size(); ++i) {
    EXPECT_EQ(typed.inputs[i].dtype, parsed.inputs[i].dtype) << i;
    EXPECT_EQ(typed.inputs[i].shape, parsed.inputs[i].shape) << i;
  }
  EXPECT_EQ(typed.input_names, parsed.input_names);
  ASSERT_EQ(typed.input_shm.size(), parsed.input_shm.size());
  for (size_t i = 0; i < typed.input_shm.size(); ++i) {
    EXPECT_EQ(typed.input_shm[i].region, parsed.input_shm[i].region) << i;
    EXPECT_EQ(typed.input_shm[i].offset, parsed.input_shm[i].offset) << i;
    EXPECT_EQ(typed.input_shm[i].bytes, parsed.input_shm[i].bytes) << i;
  }
  EXPECT_EQ(typed.timeout_ms, parsed.timeout_ms);
  EXPECT_EQ(typed.priority, parsed.priority);
  EXPECT_EQ(typed.client_weight, parsed.client_weight);
  EXPECT_FALSE(typed.output_shm.used());
  EXPECT_FALSE(parsed.output_shm.used());
  ASSERT_EQ(typed.output_places.size(), parsed.output_places.size());
  for (size_t i = 0; i < typed.output_places.size(); ++i) {
    EXPECT_EQ(typed.output_places[i].name, parsed.output_places[i].name) << i;
    EXPECT_EQ(typed.output_places[i].ref.region, parsed.output_places[i].ref.region) << i;
    EXPECT_EQ(typed.output_places[i].ref.offset, parsed.output_places[i].ref.offset) << i;
    EXPECT_EQ(typed.output_places[i].ref.bytes, parsed.output_places[i].ref.bytes) << i;
  }
}

TEST(V2InferenceTest, ToRequestHeaderIsWhatTheLoopReadsFromToFarmRequestsJson) {
  int accepted = 0, refused_here = 0, refused_by_loop = 0;
  for (const TypedCase& c : TypedCases()) {
    SCOPED_TRACE(c.what);
    V2InferRequest as_json = c.make();
    V2InferRequest as_typed = c.make();
    json header;
    std::vector<zmq::message_t> json_frames;
    RequestHeader typed;
    std::vector<zmq::message_t> typed_frames;
    const Status json_status = ToFarmRequest(as_json, c.limits, &header, &json_frames);
    const Status typed_status = ToRequestHeader(as_typed, c.limits, &typed, &typed_frames);
    ASSERT_EQ(typed_status.code(), json_status.code()) << json_status.ToString().substr(0, 300);
    ASSERT_EQ(typed_status.message(), json_status.message());
    if (!json_status.ok()) {
      ++refused_here;
      continue;
    }
    header["id"] = 12345;  // as FarmChannel::Call sets it
    RequestHeader parsed;
    const Status parse_status = ParseRequestHeader(
        header.dump(-1, ' ', false, json::error_handler_t::replace), &parsed, c.limits);
    const Status check_status = CheckRequestHeader(typed, c.limits);
    ASSERT_EQ(check_status.code(), parse_status.code()) << parse_status.ToString();
    ASSERT_EQ(check_status.message(), parse_status.message());
    if (!parse_status.ok()) {
      ++refused_by_loop;
      continue;
    }
    ++accepted;
    ExpectSameHeader(parsed, typed);
    ASSERT_EQ(typed_frames.size(), json_frames.size());
    for (size_t i = 0; i < typed_frames.size(); ++i) {
      EXPECT_EQ(typed_frames[i].to_string(), json_frames[i].to_string()) << i;
    }
  }
  // The table covers all three outcomes.
  EXPECT_GE(accepted, 8);
  EXPECT_GE(refused_here, 10);
  EXPECT_GE(refused_by_loop, 10);
}

// The cheap bound decides whether the JSON is written to measure the header: a request under the
// bound never writes it, one over it is measured exactly (just over and just under the limit).
TEST(V2InferenceTest, ToRequestHeaderMeasuresTheHeaderExactlyAtTheLimit) {
  auto request = [](size_t name_bytes) {
    V2InferRequest r = OneInput("m");
    r.inputs[0].name = std::string(name_bytes, 'n');
    return r;
  };
  RequestLimits limits;
  limits.max_header_bytes = 4096;
  V2InferRequest probe = request(1);
  json header;
  std::vector<zmq::message_t> frames;
  ASSERT_TRUE(ToFarmRequest(probe, limits, &header, &frames).ok());
  // The name that makes the header exactly fill the room left for the channel's id.
  const size_t overhead = header.dump().size() - 1;
  const size_t fill = limits.max_header_bytes - kFarmIdReserveBytes - overhead;
  for (size_t name : {fill - 1, fill, fill + 1}) {
    V2InferRequest as_json = request(name);
    V2InferRequest as_typed = request(name);
    RequestHeader typed;
    const Status json_status = ToFarmRequest(as_json, limits, &header, &frames);
    const Status typed_status = ToRequestHeader(as_typed, limits, &typed, &frames);
    EXPECT_EQ(json_status.ok(), name <= fill) << name;
    EXPECT_EQ(typed_status.ToString(), json_status.ToString()) << name;
  }
}

}  // namespace
}  // namespace torchfarm
