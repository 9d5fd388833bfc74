// Triton's system shared memory on the front ends, as pure functions: the shared-memory parameter
// parser (v2_shm_parameters.h), who may use the extension, the register body, the routes, and the
// requests and answers that carry regions (HTTP codec, ToFarmRequest, FromFarmReply). Hostile
// input first, then a good request.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <boost/beast/http/verb.hpp>
#include <nlohmann/json.hpp>

#include "common/protocol.h"
#include "supervisor/frontend/http_v2_handler.h"
#include "supervisor/frontend/v2_http_codec.h"
#include "supervisor/frontend/v2_inference.h"
#include "supervisor/frontend/v2_shm_parameters.h"

namespace torchfarm {
namespace {

using nlohmann::json;

std::string ShmError(const json& params) {
  V2ShmPlace place;
  Status s = ParseV2ShmParameters(params, "inputs[0]", &place);
  return s.ok() ? "OK" : s.message();
}

TEST(V2ShmParametersTest, EveryFieldIsCheckedAndNamed) {
  EXPECT_EQ(ShmError({{"shared_memory_region", 3}, {"shared_memory_byte_size", 4}}),
            "inputs[0].parameters.shared_memory_region: expected the name of a registered "
            "region, got number 3");
  EXPECT_EQ(ShmError({{"shared_memory_region", ""}, {"shared_memory_byte_size", 4}}),
            "inputs[0].parameters.shared_memory_region: expected the name of a registered "
            "region, got string \"\"");
  EXPECT_EQ(ShmError({{"shared_memory_region", "r"}}),
            "inputs[0].parameters.shared_memory_byte_size: expected an integer 1..2^62 with "
            "shared_memory_region, got nothing");
  EXPECT_EQ(ShmError({{"shared_memory_region", "r"}, {"shared_memory_byte_size", 0}}),
            "inputs[0].parameters.shared_memory_byte_size: expected an integer 1..2^62, got 0");
  EXPECT_EQ(ShmError({{"shared_memory_region", "r"}, {"shared_memory_byte_size", -4}}),
            "inputs[0].parameters.shared_memory_byte_size: expected an integer 1..2^62, got "
            "number -4");
  EXPECT_EQ(ShmError({{"shared_memory_region", "r"},
                      {"shared_memory_byte_size", 4},
                      {"shared_memory_offset", (uint64_t{1} << 62) + 1}}),
            "inputs[0].parameters.shared_memory_offset: expected an integer 0..2^62, got " +
                std::to_string((uint64_t{1} << 62) + 1));
  EXPECT_EQ(ShmError({{"shared_memory_region", "r"},
                      {"shared_memory_byte_size", 4},
                      {"shared_memory_offset", 1.5}}),
            "inputs[0].parameters.shared_memory_offset: expected an integer 0..2^62, got number "
            "1.5");
  EXPECT_EQ(ShmError({{"shared_memory_offset", 8}}),
            "inputs[0].parameters.shared_memory_offset: given without shared_memory_region; "
            "expected all of shared_memory_region, shared_memory_byte_size and optionally "
            "shared_memory_offset");
  // Good, at the limits.
  V2ShmPlace place;
  ASSERT_TRUE(ParseV2ShmParameters({{"shared_memory_region", "r"},
                                    {"shared_memory_byte_size", uint64_t{1} << 62},
                                    {"shared_memory_offset", uint64_t{1} << 62}},
                                   "x", &place)
                  .ok());
  EXPECT_EQ(place.region, "r");
  EXPECT_EQ(place.byte_size, uint64_t{1} << 62);
  EXPECT_EQ(place.offset, uint64_t{1} << 62);
  ASSERT_TRUE(ParseV2ShmParameters({{"binary_data_size", 4}}, "x", &place).ok());
  EXPECT_FALSE(place.used());
}

TEST(V2ShmParametersTest, LoopbackPeersOnly) {
  for (const char* peer : {"127.0.0.1:5000", "127.8.9.1:1", "[::1]:5000", "ipv4:127.0.0.1:40000",
                           "ipv6:[::1]:40000", "unix:/tmp/x.sock", "ipv6:[::ffff:127.0.0.1]:1"}) {
    EXPECT_TRUE(IsLoopbackPeer(peer)) << peer;
  }
  for (const char* peer : {"10.0.0.1:5000", "[::2]:5000", "ipv4:192.168.1.4:1", "unknown", "",
                           "ipv6:[fe80::1]:3", "128.0.0.1:1", "[::ffff:10.0.0.1]:1"}) {
    EXPECT_FALSE(IsLoopbackPeer(peer)) << peer;
  }
  EXPECT_EQ(SystemShmAllowed(false, "127.0.0.1:1", StatusCode::kUnavailable).message(),
            "system shared memory is off on this farm: set \"frontend\": "
            "{\"system_shared_memory\": true} in its config to let loopback clients register "
            "regions (docs/kserve-v2.md)");
  EXPECT_EQ(SystemShmAllowed(true, "ipv4:10.1.2.3:9", StatusCode::kUnavailable).message(),
            "system shared memory is served to clients on this host only (loopback 127.0.0.0/8, "
            "::1, or a unix socket); this client is ipv4:10.1.2.3:9");
  EXPECT_TRUE(SystemShmAllowed(true, "ipv4:127.0.0.1:9", StatusCode::kUnavailable).ok());
}

TEST(V2ShmParametersTest, RegisterBody) {
  std::string key;
  uint64_t offset = 9;
  uint64_t size = 0;
  auto error = [&](std::string_view body) {
    Status s = ParseSystemShmRegisterBody(body, &key, &offset, &size);
    return s.ok() ? std::string("OK") : s.message();
  };
  EXPECT_EQ(error("[1]"),
            "register body: expected a JSON object {\"key\": \"/name\", \"offset\": "
            "N, \"byte_size\": N}, got array [1]");
  EXPECT_EQ(error("{"),
            "register body: expected a JSON object {\"key\": \"/name\", \"offset\": "
            "N, \"byte_size\": N}, got invalid JSON");
  EXPECT_EQ(error(R"({"offset": 0, "byte_size": 4})"),
            "register body: \"key\": expected a string \"/name\", got nothing");
  EXPECT_EQ(error(R"({"key": "/k", "byte_size": 0})"),
            "register body: \"byte_size\": expected an integer 1..2^62, got number 0");
  EXPECT_EQ(error(R"({"key": "/k", "offset": -1, "byte_size": 4})"),
            "register body: \"offset\": expected an integer 0..2^62, got number -1");
  EXPECT_EQ(error(R"({"key": "/k", "byte_size": "4"})"),
            "register body: \"byte_size\": expected an integer 1..2^62, got string \"4\"");
  EXPECT_EQ(error(R"({"key": "/k", "byte_size": 4})"), "OK");
  EXPECT_EQ(key, "/k");
  EXPECT_EQ(offset, 0u);
  EXPECT_EQ(size, 4u);
  EXPECT_EQ(error(R"({"key": "/k2", "offset": 64, "byte_size": 128})"), "OK");
  EXPECT_EQ(offset, 64u);
}

TEST(V2ShmParametersTest, Routes) {
  namespace http = boost::beast::http;
  V2Target t = ParseV2Target(http::verb::get, "/v2/systemsharedmemory/status");
  EXPECT_EQ(t.http_status, 0);
  EXPECT_EQ(t.route, V2Route::kSystemShmStatus);
  EXPECT_EQ(t.model, "");
  t = ParseV2Target(http::verb::get, "/v2/systemsharedmemory/region/in%20put/status");
  EXPECT_EQ(t.route, V2Route::kSystemShmStatus);
  EXPECT_EQ(t.model, "in put");
  t = ParseV2Target(http::verb::post, "/v2/systemsharedmemory/region/r/register");
  EXPECT_EQ(t.route, V2Route::kSystemShmRegister);
  EXPECT_EQ(t.model, "r");
  t = ParseV2Target(http::verb::post, "/v2/systemsharedmemory/region/r/unregister");
  EXPECT_EQ(t.route, V2Route::kSystemShmUnregister);
  t = ParseV2Target(http::verb::post, "/v2/systemsharedmemory/unregister");
  EXPECT_EQ(t.route, V2Route::kSystemShmUnregister);
  EXPECT_EQ(t.model, "");
  EXPECT_EQ(ParseV2Target(http::verb::get, "/v2/systemsharedmemory/region/r/register").http_status,
            405);
  EXPECT_EQ(ParseV2Target(http::verb::post, "/v2/systemsharedmemory/register").http_status, 404);
  EXPECT_EQ(ParseV2Target(http::verb::get, "/v2/systemsharedmemory/region//status").http_status,
            404);
}

V2InferRequest Parse(const std::string& body, Status* status) {
  V2InferRequest request;
  *status = ParseV2InferRequest(std::make_shared<const std::string>(body), body.size(), &request);
  return request;
}

TEST(V2ShmRequestTest, HttpInputsAndOutputsInRegionsBecomeTheFarmHeader) {
  Status s;
  Parse(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[1,2],)"
        R"("parameters":{"shared_memory_region":"r","shared_memory_byte_size":8}}]})",
        &s);
  EXPECT_EQ(s.message(),
            "inputs[0]: expected either parameters.shared_memory_region or \"data\" / "
            "parameters.binary_data_size, got both");
  Parse(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[1,2]}],)"
        R"("outputs":[{"name":"y","parameters":{"classification":2,)"
        R"("shared_memory_region":"r","shared_memory_byte_size":8}}]})",
        &s);
  EXPECT_EQ(s.message(),
            "outputs[0]: expected parameters.classification or parameters.shared_memory_region, "
            "got both (classification strings are not placed in shared memory)");
  V2InferRequest bad_size =
      Parse(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[2,3],)"
            R"("parameters":{"shared_memory_region":"r","shared_memory_byte_size":20}}]})",
            &s);
  ASSERT_TRUE(s.ok()) << s.message();
  json header;
  std::vector<zmq::message_t> frames;
  EXPECT_EQ(ToFarmRequest(bad_size, RequestLimits{}, &header, &frames).message(),
            "inputs[0] ('x'): FP32 [2, 3] needs 24 bytes, parameters.shared_memory_byte_size is "
            "20");
  EXPECT_FALSE(CheckV2ShmAllowed(bad_size, false, "127.0.0.1:1").ok());
  EXPECT_EQ(CheckV2ShmAllowed(bad_size, true, "10.0.0.2:1").code(), StatusCode::kInvalidArgument);

  V2InferRequest good = Parse(
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[2,3],)"
      R"("parameters":{"shared_memory_region":"r","shared_memory_byte_size":24,)"
      R"("shared_memory_offset":4}},)"
      R"({"name":"z","datatype":"INT64","shape":[1],"data":[7]}],)"
      R"("outputs":[{"name":"y","parameters":{"binary_data":false,"shared_memory_region":"o",)"
      R"("shared_memory_byte_size":100,"shared_memory_offset":12}},{"name":"w"}]})",
      &s);
  ASSERT_TRUE(s.ok()) << s.message();
  good.model = "m";  // set by the route
  EXPECT_TRUE(UsesSystemShm(good));
  EXPECT_TRUE(CheckV2ShmAllowed(good, true, "127.0.0.1:1").ok());
  ASSERT_TRUE(ToFarmRequest(good, RequestLimits{}, &header, &frames).ok());
  ASSERT_EQ(frames.size(), 1u);  // only z travels as a frame
  EXPECT_EQ(frames[0].size(), 8u);
  EXPECT_EQ(header["inputs"][0]["shm"], json::parse(R"({"region":"r","offset":4})"));
  EXPECT_FALSE(header["inputs"][1].contains("shm"));
  EXPECT_EQ(header["outputs_shm"],
            json::parse(R"([{"name":"y","region":"o","offset":12,"bytes":100}])"));
  // The farm header parses back on the loop's side with the same references.
  RequestHeader parsed;
  const Status back = ParseRequestHeader(header.dump(), &parsed);
  ASSERT_TRUE(back.ok()) << back.message();
  ASSERT_EQ(parsed.output_places.size(), 1u);
  EXPECT_EQ(parsed.output_places[0].ref.offset, 12u);
  EXPECT_EQ(parsed.input_shm[0].region, "r");

  // The farm's reply: y placed (no frame), w as a frame.
  ReplyHeader reply;
  ASSERT_TRUE(
      ParseReplyHeader(
          R"({"v":1,"id":1,"status":"ok","outputs":[)"
          R"({"dtype":"float32","name":"w","shape":[1]},)"
          R"({"dtype":"float32","name":"y","shape":[2,3],"shm":{"region":"o","offset":12}}]})",
          &reply)
          .ok());
  std::vector<zmq::message_t> reply_frames;
  reply_frames.emplace_back(4);
  V2InferResponse response;
  ASSERT_TRUE(FromFarmReply(good, reply, std::move(reply_frames), &response).ok());
  ASSERT_EQ(response.outputs.size(), 2u);
  EXPECT_EQ(response.outputs[0].name, "y");
  EXPECT_TRUE(response.outputs[0].shm.used());
  EXPECT_EQ(response.outputs[0].data.size(), 0u);
  EXPECT_EQ(response.outputs[1].data.size(), 4u);
  const json body = json::parse(WriteV2InferResponse(response).bytes);
  // As Triton answers an output in shared memory over HTTP: no data, no parameters (its C++
  // client reads any output "parameters" as binary_data_size's).
  EXPECT_EQ(body["outputs"][0], json::parse(R"({"name":"y","datatype":"FP32","shape":[2,3]})"));
  EXPECT_EQ(body["outputs"][1]["data"].size(), 1u);
  // A reply whose frames do not match its outputs is the farm's bug, said as such.
  std::vector<zmq::message_t> none;
  EXPECT_EQ(FromFarmReply(good, reply, std::move(none), &response).code(), StatusCode::kInternal);
}

TEST(V2ShmRequestTest, ServerMetadataListsTheExtensionOnlyWhenOn) {
  const json off = json::parse(V2ServerMetadataBody(false));
  const json on = json::parse(V2ServerMetadataBody(true));
  for (const json& e : off["extensions"]) EXPECT_NE(e, "system_shared_memory");
  EXPECT_EQ(on["extensions"].back(), "system_shared_memory");
  EXPECT_EQ(on["extensions"].size(), off["extensions"].size() + 1);
}

}  // namespace
}  // namespace torchfarm
