// CheckRequestHeader (common/request_header_check.h): a header built in code is refused exactly as
// ParseRequestHeaderJson refuses the same header written as JSON, and accepted when it is.
#include "common/request_header_check.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace torchfarm {
namespace {

using nlohmann::json;

RequestHeader Plain() {
  RequestHeader header;
  header.model = "m";
  header.inputs.push_back(TensorSpec{DType::kFloat32, {1, 4}});
  header.input_names.push_back("x");
  return header;
}

// `header` as JSON text, every field written (defaults left out as a client would).
std::string AsJson(const RequestHeader& header) {
  json inputs = json::array();
  for (size_t i = 0; i < header.inputs.size(); ++i) {
    json input = {{"dtype", std::string(DTypeName(header.inputs[i].dtype))},
                  {"shape", header.inputs[i].shape}};
    if (i < header.input_names.size()) input["name"] = header.input_names[i];
    if (header.input_in_shm(i)) {
      input["shm"] = {{"region", header.input_shm[i].region},
                      {"offset", header.input_shm[i].offset}};
    }
    inputs.push_back(std::move(input));
  }
  json j = {{"v", 1}, {"model", header.model}, {"inputs", inputs}};
  if (!header.version.empty()) j["version"] = header.version;
  if (header.timeout_ms != 0) j["timeout_ms"] = header.timeout_ms;
  if (header.priority != 0) j["priority"] = header.priority;
  if (header.client_weight != 0) j["client_weight"] = header.client_weight;
  if (!header.output_places.empty()) j["outputs_shm"] = OutputPlacesToJson(header.output_places);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

TEST(CheckRequestHeader, RefusesWhatTheJsonPathRefusesInItsWords) {
  RequestLimits rank3;
  rank3.max_rank = 3;
  RequestLimits two_inputs;
  two_inputs.max_inputs = 2;
  const std::vector<std::pair<std::function<void(RequestHeader&)>, RequestLimits>> cases = {
      {[](RequestHeader&) {}, RequestLimits{}},
      {[](RequestHeader& h) { h.model.clear(); }, RequestLimits{}},
      {[](RequestHeader& h) { h.version = "1.0-rc_2"; }, RequestLimits{}},
      {[](RequestHeader& h) { h.version = std::string(33, '1'); }, RequestLimits{}},
      {[](RequestHeader& h) { h.version = "v/2"; }, RequestLimits{}},
      {[](RequestHeader& h) { h.inputs.clear(), h.input_names.clear(); }, RequestLimits{}},
      {[](RequestHeader& h) {
         for (int i = 0; i < 3; ++i) {
           h.inputs.push_back(TensorSpec{DType::kInt8, {1}});
           h.input_names.push_back("i" + std::to_string(i));
         }
       },
       two_inputs},
      {[](RequestHeader& h) {
         h.inputs[0].shape = {1, 1, 1, 1};
       },
       rank3},
      {[](RequestHeader& h) {
         h.inputs[0].shape = {1, -3};
       },
       RequestLimits{}},
      {[](RequestHeader& h) { h.inputs[0].shape = std::vector<int64_t>(9, 1); }, RequestLimits{}},
      {[](RequestHeader& h) { h.input_names[0] = "a b"; }, RequestLimits{}},
      {[](RequestHeader& h) { h.input_names[0] = std::string(65, 'n'); }, RequestLimits{}},
      {[](RequestHeader& h) {
         h.inputs.push_back(TensorSpec{DType::kInt8, {1}});  // named inputs[0], unnamed inputs[1]
       },
       RequestLimits{}},
      {[](RequestHeader& h) { h.input_names.clear(); }, RequestLimits{}},
      {[](RequestHeader& h) { h.timeout_ms = -1; }, RequestLimits{}},
      {[](RequestHeader& h) { h.timeout_ms = INT64_MAX; }, RequestLimits{}},
      {[](RequestHeader& h) { h.priority = kMaxPriority; }, RequestLimits{}},
      {[](RequestHeader& h) { h.priority = kMaxPriority + 1; }, RequestLimits{}},
      {[](RequestHeader& h) { h.priority = -7; }, RequestLimits{}},
      {[](RequestHeader& h) { h.client_weight = 0.01; }, RequestLimits{}},
      {[](RequestHeader& h) { h.client_weight = 100.5; }, RequestLimits{}},
      {[](RequestHeader& h) { h.client_weight = -2; }, RequestLimits{}},
      {[](RequestHeader& h) {
         h.input_shm = {ShmRef{"r", 64, 0}};
       },
       RequestLimits{}},
      {[](RequestHeader& h) {
         h.input_shm = {ShmRef{"r", UINT64_MAX, 0}};
       },
       RequestLimits{}},
      {[](RequestHeader& h) {
         h.output_places = {OutputPlace{"y", ShmRef{"o", 3, 8}}};
       },
       RequestLimits{}},
      {[](RequestHeader& h) {
         h.output_places = {OutputPlace{"y", ShmRef{"o", 0, 8}},
                            OutputPlace{"y", ShmRef{"p", 0, 8}}};
       },
       RequestLimits{}},
      {[](RequestHeader& h) {
         h.output_places = {OutputPlace{"", ShmRef{"o", 0, 8}}};
       },
       RequestLimits{}},
      {[](RequestHeader& h) {
         h.output_places = {OutputPlace{"y", ShmRef{"", 0, 8}}};
       },
       RequestLimits{}},
      {[](RequestHeader& h) {
         h.output_places = {OutputPlace{"y", ShmRef{"o", 0, UINT64_MAX}}};
       },
       RequestLimits{}},
      {[](RequestHeader& h) {
         h.output_places.assign(kMaxOutputPlaces + 1, OutputPlace{"y", ShmRef{"o", 0, 8}});
       },
       RequestLimits{}},
  };
  int refused = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    RequestHeader header = Plain();
    cases[c].first(header);
    const std::string text = AsJson(header);
    SCOPED_TRACE("case " + std::to_string(c) + ": " + text.substr(0, 200));
    RequestHeader parsed;
    const Status expected = ParseRequestHeaderJson(text, &parsed, cases[c].second);
    const Status got = CheckRequestHeader(header, cases[c].second);
    EXPECT_EQ(got.code(), expected.code()) << expected.ToString();
    EXPECT_EQ(got.message(), expected.message());
    refused += expected.ok() ? 0 : 1;
  }
  EXPECT_GE(refused, 20);
}

// What JSON cannot say but a struct can is refused too, never read past its end.
TEST(CheckRequestHeader, RefusesCountsThatDoNotMatchTheInputs) {
  RequestHeader names = Plain();
  names.input_names.push_back("extra");
  EXPECT_EQ(CheckRequestHeader(names, RequestLimits{}).code(), StatusCode::kInvalidArgument);
  RequestHeader shm = Plain();
  shm.input_shm.resize(2);
  EXPECT_EQ(CheckRequestHeader(shm, RequestLimits{}).code(), StatusCode::kInvalidArgument);
  RequestHeader command = Plain();
  command.op = RequestOp::kShmCreate;
  EXPECT_EQ(CheckRequestHeader(command, RequestLimits{}).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace torchfarm
