// For the front ends' fake loops (fake_farm_loop.h, grpc_server_fixture.h): a front-end message
// read whichever way its header came (farm_channel.h), JSON text or a typed frame, as the JSON
// header ToFarmRequest writes, so a fake answers and a test inspects both alike.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/protocol.h"
#include "supervisor/frontend/typed_frame.h"
#include "tests/frontend/hub_loop.h"

namespace torchfarm::testing {

// `header` as the JSON ToFarmRequest writes for the same request (defaults left out).
inline nlohmann::json TypedRequestJson(const RequestHeader& header) {
  nlohmann::json inputs = nlohmann::json::array();
  for (size_t i = 0; i < header.inputs.size(); ++i) {
    nlohmann::json input = {{"dtype", std::string(DTypeName(header.inputs[i].dtype))},
                            {"shape", header.inputs[i].shape}};
    if (i < header.input_names.size()) input["name"] = header.input_names[i];
    if (header.input_in_shm(i)) {
      input["shm"] = {{"region", header.input_shm[i].region},
                      {"offset", header.input_shm[i].offset}};
    }
    inputs.push_back(std::move(input));
  }
  nlohmann::json j = {{"v", kProtocolVersion}, {"model", header.model}, {"inputs", inputs}};
  if (!header.version.empty()) j["version"] = header.version;
  if (header.timeout_ms > 0) j["timeout_ms"] = header.timeout_ms;
  if (header.priority != 0) j["priority"] = header.priority;
  if (header.client_weight > 0) j["client_weight"] = header.client_weight;
  if (!header.output_places.empty()) j["outputs_shm"] = OutputPlacesToJson(header.output_places);
  return j;
}

// [identity][tag][call id][header][data...]: *tag without kTypedTagPrefix, *header as JSON (a
// typed header through TypedRequestJson; discarded when unreadable). False for a message too
// short to hold a header.
inline bool ReadFrontendMessage(std::vector<zmq::message_t>& frames, std::string* tag,
                                nlohmann::json* header) {
  if (frames.size() < 4) return false;
  *tag = frames[1].to_string();
  const std::string prefix = kTypedTagPrefix;
  if (tag->compare(0, prefix.size(), prefix) == 0) {
    *tag = tag->substr(prefix.size());
    const RequestHeader* typed = TypedFrameValue<RequestHeader>(frames[3]);
    *header = typed ? TypedRequestJson(*typed) : nlohmann::json(nlohmann::json::value_t::discarded);
    return true;
  }
  *header = nlohmann::json::parse(frames[3].to_string(), nullptr, false);
  return true;
}

}  // namespace torchfarm::testing
