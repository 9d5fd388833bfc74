// The v2 <-> farm translation (v2_inference.h); the datatype names are common/dtype.h's.
#include "supervisor/frontend/v2_inference.h"
#include "supervisor/frontend/v2_classification.h"

#include <algorithm>
#include <array>
#include <unordered_set>
#include <utility>

#include "common/model_versions.h"
#include "common/tensor_names.h"
#include "common/tensor_spec.h"

namespace torchfarm {
namespace {

// The dtype, shape and byte count of one input, named `where`.
Status CheckInput(const V2Tensor& input, const std::string& where, DType* dtype) {
  if (Status s = DTypeFromV2(input.datatype, where, dtype); !s.ok()) return s;
  if (input.shape.size() > static_cast<size_t>(kMaxRank)) {
    return InvalidArgument(where + ": shape " + ShapeToString(input.shape) + " has rank " +
                           std::to_string(input.shape.size()) + "; the most is " +
                           std::to_string(kMaxRank));
  }
  std::optional<uint64_t> bytes = ByteSize(TensorSpec{*dtype, input.shape});
  if (!bytes) {
    return InvalidArgument(where + ": shape " + ShapeToString(input.shape) +
                           " must have dimensions >= 0 and fewer than 2^62 elements");
  }
  if (input.shm.used()) {
    if (*bytes != input.shm.byte_size) {
      return InvalidArgument(where + ": " + input.datatype + " " + ShapeToString(input.shape) +
                             " needs " + std::to_string(*bytes) +
                             " bytes, parameters.shared_memory_byte_size is " +
                             std::to_string(input.shm.byte_size));
    }
    return Status::Ok();
  }
  if (*bytes != input.data.size()) {
    return InvalidArgument(where + ": " + input.datatype + " " + ShapeToString(input.shape) +
                           " needs " + std::to_string(*bytes) + " bytes, got " +
                           std::to_string(input.data.size()));
  }
  return Status::Ok();
}

// The reply's name for output `index`: "name" when the farm sent one, else Triton's default
// (ParseReplyHeader fills output_names either way).
std::string OutputName(const ReplyHeader& reply, size_t index) {
  if (index < reply.output_names.size()) return reply.output_names[index];
  return DefaultOutputName(index);
}

// The most bytes `header` can take as JSON text without dumping it: every string byte may become
// a 6-byte escape, a dimension 20 digits and a comma.
size_t FarmHeaderBound(const V2InferRequest& request) {
  constexpr size_t kEscape = 6;
  size_t bound = 128 + kEscape * (request.model.size() + request.version.size());
  for (const V2Tensor& input : request.inputs) {
    bound += 64 + kEscape * input.name.size() + 21 * input.shape.size();
  }
  return bound;
}

// The header `request` became fits limits.max_header_bytes with the channel's "id"; else the
// error names the limit, the size and where the bytes are.
Status CheckFarmHeaderSize(const V2InferRequest& request, const nlohmann::json& header,
                           const RequestLimits& limits) {
  const size_t room = limits.max_header_bytes > kFarmIdReserveBytes
                          ? limits.max_header_bytes - kFarmIdReserveBytes
                          : 0;
  if (FarmHeaderBound(request) <= room) return Status::Ok();
  const size_t bytes = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
  if (bytes <= room) return Status::Ok();
  size_t names = 0;
  size_t longest = 0;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    names += request.inputs[i].name.size();
    if (request.inputs[i].name.size() > request.inputs[longest].name.size()) longest = i;
  }
  std::string where = "model_name is " + std::to_string(request.model.size()) + " bytes";
  if (!request.inputs.empty()) {
    where += ", the " + std::to_string(request.inputs.size()) + " input names " +
             std::to_string(names) + " bytes (the longest, inputs[" + std::to_string(longest) +
             "], " + std::to_string(request.inputs[longest].name.size()) + " bytes)";
  }
  return InvalidArgument("the request needs a farm header of " +
                         std::to_string(bytes + kFarmIdReserveBytes) +
                         " bytes, over limits.max_header_bytes (" +
                         std::to_string(limits.max_header_bytes) + "): " + where);
}

}  // namespace

std::string V2InputWhere(size_t index, const std::string& name) {
  constexpr size_t kMaxShown = 128;
  const std::string shown = name.size() <= kMaxShown ? "'" + name + "'"
                                                     : "'" + name.substr(0, kMaxShown) + "...' (" +
                                                           std::to_string(name.size()) + " bytes)";
  return "inputs[" + std::to_string(index) + "] (" + shown + ")";
}

Status DTypeFromV2(std::string_view datatype, const std::string& where, DType* out) {
  if (std::optional<DType> dtype = DTypeFromV2Name(datatype)) {
    *out = *dtype;
    return Status::Ok();
  }
  if (datatype == "BYTES") {
    return InvalidArgument(where + ": datatype BYTES (strings) is not supported; use one of " +
                           AllV2DatatypeNames());
  }
  return InvalidArgument(where + ": datatype '" + std::string(datatype) + "' is not one of " +
                         AllV2DatatypeNames());
}

Status ToFarmRequest(V2InferRequest& request, const RequestLimits& limits, nlohmann::json* header,
                     std::vector<zmq::message_t>* frames) {
  if (request.inputs.empty()) return InvalidArgument("inputs: expected at least one input, got 0");
  if (request.inputs.size() > limits.max_inputs) {
    return InvalidArgument("inputs: expected at most " + std::to_string(limits.max_inputs) +
                           " inputs (limits.max_frames " + std::to_string(limits.max_inputs + 1) +
                           " less the header), got " + std::to_string(request.inputs.size()));
  }
  nlohmann::json inputs = nlohmann::json::array();
  std::unordered_set<std::string> names;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const V2Tensor& input = request.inputs[i];
    const std::string where = V2InputWhere(i, input.name);
    if (input.name.empty()) {
      return InvalidArgument("inputs[" + std::to_string(i) + "].name: expected a non-empty name");
    }
    if (!names.insert(input.name).second) {
      return InvalidArgument(where + ": the name is used by an earlier input too; names must be "
                             "unique");
    }
    DType dtype;
    if (Status s = CheckInput(input, where, &dtype); !s.ok()) return s;
    inputs.push_back({{"name", input.name},
                      {"dtype", std::string(DTypeName(dtype))},
                      {"shape", input.shape}});
    if (input.shm.used()) {
      inputs.back()["shm"] = {{"region", input.shm.region}, {"offset", input.shm.offset}};
    }
  }
  nlohmann::json places = nlohmann::json::array();
  for (const V2RequestedOutput& output : request.outputs) {
    if (!output.shm.used()) continue;
    places.push_back({{"name", output.name},
                      {"region", output.shm.region},
                      {"offset", output.shm.offset},
                      {"bytes", output.shm.byte_size}});
  }
  // A name asked for again would be answered with another copy of the output's bytes: with
  // thousands of repeats in one message, memory without bound.
  std::unordered_set<std::string> outputs;
  for (size_t i = 0; i < request.outputs.size(); ++i) {
    if (!outputs.insert(request.outputs[i].name).second) {
      return InvalidArgument("outputs[" + std::to_string(i) + "].name: '" +
                             request.outputs[i].name + "' is requested twice");
    }
  }
  *header = {{"v", kProtocolVersion}, {"model", request.model}, {"inputs", std::move(inputs)}};
  if (!request.version.empty()) (*header)["version"] = request.version;
  if (request.timeout_ms > 0) (*header)["timeout_ms"] = request.timeout_ms;
  if (request.priority != 0) (*header)["priority"] = request.priority;
  if (request.client_weight > 0) (*header)["client_weight"] = request.client_weight;
  if (!places.empty()) (*header)["outputs_shm"] = std::move(places);
  if (Status s = CheckFarmHeaderSize(request, *header, limits); !s.ok()) return s;
  frames->clear();
  frames->reserve(request.inputs.size());
  for (V2Tensor& input : request.inputs) {
    if (!input.shm.used()) frames->push_back(std::move(input.data));
  }
  return Status::Ok();
}

Status FromFarmReply(const V2InferRequest& request, const ReplyHeader& reply,
                     std::vector<zmq::message_t> frames, V2InferResponse* out) {
  if (!reply.status.ok()) return reply.status;
  // Outputs the farm placed in system shared memory carry no frame: give each of the others its
  // frame, and the placed ones an empty message.
  auto in_shm = [&reply](size_t k) {
    return k < reply.output_shm.size() && reply.output_shm[k].used();
  };
  size_t framed = 0;
  for (size_t k = 0; k < reply.outputs.size(); ++k) framed += in_shm(k) ? 0 : 1;
  if (frames.size() != framed) {
    return Internal("the farm's reply declares " + std::to_string(framed) +
                    " outputs with data but carries " + std::to_string(frames.size()) +
                    " data frames");
  }
  if (framed != reply.outputs.size()) {
    std::vector<zmq::message_t> spread(reply.outputs.size());
    for (size_t k = 0, next = 0; k < reply.outputs.size(); ++k) {
      if (!in_shm(k)) spread[k] = std::move(frames[next++]);
    }
    frames = std::move(spread);
  }
  std::vector<std::string> names;
  for (size_t k = 0; k < reply.outputs.size(); ++k) {
    const std::optional<uint64_t> bytes = ByteSize(reply.outputs[k]);
    if (!bytes || (!in_shm(k) && *bytes != frames[k].size())) {
      return Internal("the farm's reply output " + std::to_string(k) + " is " +
                      SpecToString(reply.outputs[k]) + " but its frame holds " +
                      std::to_string(frames[k].size()) + " bytes");
    }
    names.push_back(OutputName(reply, k));
  }
  // Which reply output goes where: every one in order, or the requested ones.
  std::vector<size_t> picks;
  std::vector<bool> binary;
  if (request.outputs.empty()) {
    for (size_t k = 0; k < names.size(); ++k) picks.push_back(k);
    binary.assign(names.size(), request.binary_outputs);
  }
  for (size_t i = 0; i < request.outputs.size(); ++i) {
    size_t k = 0;
    while (k < names.size() && names[k] != request.outputs[i].name) ++k;
    if (k == names.size()) {
      std::string there;
      for (const auto& name : names) there += (there.empty() ? "" : ", ") + name;
      return InvalidArgument("outputs[" + std::to_string(i) + "]: model '" + request.model +
                             "' has no output '" + request.outputs[i].name + "'; it returns " +
                             (there.empty() ? "none" : there));
    }
    picks.push_back(k);
    binary.push_back(!request.outputs[i].shm.used() &&
                     (request.outputs[i].binary || request.binary_outputs));
  }
  *out = V2InferResponse{};
  out->model = request.model;
  // The farm's reply does not say which version ran an unpinned request: empty then.
  out->version = request.version;
  out->id = request.id;
  out->timing = reply.timing;
  out->binary = std::move(binary);
  // An output asked for twice is copied for all but its last use, which takes the frame.
  std::vector<int> uses(frames.size(), 0);
  for (size_t k : picks) ++uses[k];
  for (size_t k : picks) {
    V2Tensor tensor;
    tensor.name = names[k];
    tensor.datatype = std::string(V2DatatypeName(reply.outputs[k].dtype));
    tensor.shape = reply.outputs[k].shape;
    if (--uses[k] > 0) {
      tensor.data.copy(frames[k]);
    } else {
      tensor.data = std::move(frames[k]);
    }
    const size_t i = out->outputs.size();
    if (in_shm(k) && i < request.outputs.size()) {
      tensor.shm = request.outputs[i].shm;
    } else if (in_shm(k)) {
      return Internal("the farm placed output '" + names[k] + "' in shared memory unasked");
    }
    if (i < request.outputs.size() && request.outputs[i].class_count > 0) {
      if (Status s = ClassifyOutput(request.outputs[i].class_count, &tensor); !s.ok()) return s;
    }
    out->outputs.push_back(std::move(tensor));
  }
  return Status::Ok();
}

bool UsesSystemShm(const V2InferRequest& request) {
  for (const V2Tensor& input : request.inputs) {
    if (input.shm.used()) return true;
  }
  for (const V2RequestedOutput& output : request.outputs) {
    if (output.shm.used()) return true;
  }
  return false;
}

int V2PriorityToWire(uint64_t priority) {
  return priority > static_cast<uint64_t>(kMaxPriority) ? 0 : static_cast<int>(priority);
}

int HttpStatusOf(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kDeadlineExceeded: return 504;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kInternal: return 500;
  }
  return 500;
}

Status FindModelVersionInMeta(const nlohmann::json& meta, const std::string& name,
                              const std::string& version, const nlohmann::json** out) {
  static const nlohmann::json kEmpty = nlohmann::json::array();
  auto models = meta.find("models");
  const nlohmann::json& list = models != meta.end() && models->is_array() ? *models : kEmpty;
  std::vector<std::string> served;
  std::vector<std::string> versions;
  const nlohmann::json* first = nullptr;
  for (const nlohmann::json& model : list) {
    const std::string model_name = model.is_object() ? model.value("name", "") : "";
    if (model_name != name) {
      if (std::find(served.begin(), served.end(), model_name) == served.end()) {
        served.push_back(model_name);
      }
      continue;
    }
    const std::string model_version = model.value("version", "1");
    versions.push_back(model_version);
    if (!first) first = &model;
    const bool chosen = version.empty() ? model.value("default", false) : model_version == version;
    if (chosen) {
      *out = &model;
      return Status::Ok();
    }
  }
  if (first && version.empty()) {
    *out = first;
    return Status::Ok();
  }
  if (first) return VersionNotLoaded(name, version, versions);
  return ModelNotServed(name, served);
}

}  // namespace torchfarm
