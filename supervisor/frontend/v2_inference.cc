// The v2 <-> farm translation (v2_inference.h); the datatype names are common/dtype.h's.
#include "supervisor/frontend/v2_inference.h"
#include "supervisor/frontend/v2_classification.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "common/model_versions.h"
#include "common/tensor_names.h"
#include "common/tensor_spec.h"

namespace torchfarm {
namespace {

// The dtype, shape and byte count of inputs[index]; errors name it (V2InputWhere), a name
// written only when there is an error to word.
Status CheckInput(const V2Tensor& input, size_t index, DType* dtype) {
  if (std::optional<DType> known = DTypeFromV2Name(input.datatype)) {
    *dtype = *known;
  } else {
    return DTypeFromV2(input.datatype, V2InputWhere(index, input.name), dtype);
  }
  if (input.shape.size() > static_cast<size_t>(kMaxRank)) {
    return InvalidArgument(
        V2InputWhere(index, input.name) + ": shape " + ShapeToString(input.shape) + " has rank " +
        std::to_string(input.shape.size()) + "; the most is " + std::to_string(kMaxRank));
  }
  std::optional<uint64_t> bytes = ByteSize(TensorSpec{*dtype, input.shape});
  if (!bytes) {
    return InvalidArgument(V2InputWhere(index, input.name) + ": shape " +
                           ShapeToString(input.shape) +
                           " must have dimensions >= 0 and fewer than 2^62 elements");
  }
  const uint64_t have = input.shm.used() ? input.shm.byte_size : input.data.size();
  if (*bytes == have) return Status::Ok();
  const std::string where = V2InputWhere(index, input.name);
  if (input.shm.used()) {
    return InvalidArgument(where + ": " + input.datatype + " " + ShapeToString(input.shape) +
                           " needs " + std::to_string(*bytes) +
                           " bytes, parameters.shared_memory_byte_size is " +
                           std::to_string(input.shm.byte_size));
  }
  return InvalidArgument(where + ": " + input.datatype + " " + ShapeToString(input.shape) +
                         " needs " + std::to_string(*bytes) + " bytes, got " +
                         std::to_string(input.data.size()));
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

// The farm header ToFarmRequest writes for `request` (checked by CheckV2Request), without "id".
nlohmann::json FarmHeaderJson(const V2InferRequest& request) {
  nlohmann::json inputs = nlohmann::json::array();
  for (const V2Tensor& input : request.inputs) {
    const DType dtype = DTypeFromV2Name(input.datatype).value_or(DType::kFloat32);
    inputs.push_back(
        {{"name", input.name}, {"dtype", std::string(DTypeName(dtype))}, {"shape", input.shape}});
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
  nlohmann::json header = {
      {"v", kProtocolVersion}, {"model", request.model}, {"inputs", std::move(inputs)}};
  if (!request.version.empty()) header["version"] = request.version;
  if (request.timeout_ms > 0) header["timeout_ms"] = request.timeout_ms;
  if (request.priority != 0) header["priority"] = request.priority;
  if (request.client_weight > 0) header["client_weight"] = request.client_weight;
  if (!places.empty()) header["outputs_shm"] = std::move(places);
  return header;
}

// The farm header of `request` fits limits.max_header_bytes with the channel's "id"; else the
// error names the limit, the size and where the bytes are. The header is written out only when
// the cheap bound says it might not fit, so a typed request (ToRequestHeader) is worded exactly
// as its JSON one would be without building JSON in the common case.
Status CheckFarmHeaderSize(const V2InferRequest& request, const RequestLimits& limits) {
  const size_t room = limits.max_header_bytes > kFarmIdReserveBytes
                          ? limits.max_header_bytes - kFarmIdReserveBytes
                          : 0;
  if (FarmHeaderBound(request) <= room) return Status::Ok();
  const size_t bytes =
      FarmHeaderJson(request).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
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

// Every check of a v2 request before it becomes a farm request, in the order its errors are
// reported: inputs (count, names, datatype, shape, bytes), repeated outputs, the header's size.
Status CheckV2Request(const V2InferRequest& request, const RequestLimits& limits) {
  if (request.inputs.empty()) return InvalidArgument("inputs: expected at least one input, got 0");
  if (request.inputs.size() > limits.max_inputs) {
    return InvalidArgument("inputs: expected at most " + std::to_string(limits.max_inputs) +
                           " inputs (limits.max_frames " + std::to_string(limits.max_inputs + 1) +
                           " less the header), got " + std::to_string(request.inputs.size()));
  }
  std::unordered_set<std::string_view> names;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const V2Tensor& input = request.inputs[i];
    if (input.name.empty()) {
      return InvalidArgument("inputs[" + std::to_string(i) + "].name: expected a non-empty name");
    }
    if (!names.insert(input.name).second) {
      return InvalidArgument(V2InputWhere(i, input.name) +
                             ": the name is used by an earlier input too; names must be unique");
    }
    DType dtype;
    if (Status s = CheckInput(input, i, &dtype); !s.ok()) return s;
  }
  // A name asked for again would be answered with another copy of the output's bytes: with
  // thousands of repeats in one message, memory without bound.
  std::unordered_set<std::string_view> outputs;
  for (size_t i = 0; i < request.outputs.size(); ++i) {
    if (!outputs.insert(request.outputs[i].name).second) {
      return InvalidArgument("outputs[" + std::to_string(i) + "].name: '" +
                             request.outputs[i].name + "' is requested twice");
    }
  }
  return CheckFarmHeaderSize(request, limits);
}

// A string the farm header carries, as the loop would read it back from that JSON: bytes that
// are not UTF-8 become U+FFFD the way the header's dump() replaces them. ASCII (every name the
// farm serves) is left as it is without a look at nlohmann.
std::string AsHeaderString(std::string text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      return nlohmann::json::parse(nlohmann::json(text).dump(
                                       -1, ' ', false, nlohmann::json::error_handler_t::replace))
          .get<std::string>();
    }
  }
  return text;
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
  if (Status s = CheckV2Request(request, limits); !s.ok()) return s;
  *header = FarmHeaderJson(request);
  frames->clear();
  frames->reserve(request.inputs.size());
  for (V2Tensor& input : request.inputs) {
    if (!input.shm.used()) frames->push_back(std::move(input.data));
  }
  return Status::Ok();
}

Status ToRequestHeader(V2InferRequest& request, const RequestLimits& limits, RequestHeader* header,
                       std::vector<zmq::message_t>* frames) {
  if (Status s = CheckV2Request(request, limits); !s.ok()) return s;
  // Field by field what the loop reads from FarmHeaderJson's text (ParseRequestHeader): what
  // the JSON leaves out is the default here too.
  *header = RequestHeader{};
  header->model = AsHeaderString(request.model);
  header->version = AsHeaderString(request.version);
  header->inputs.reserve(request.inputs.size());
  header->input_names.reserve(request.inputs.size());
  const bool any_shm = UsesSystemShm(request);
  frames->clear();
  frames->reserve(request.inputs.size());
  for (V2Tensor& input : request.inputs) {
    const DType dtype = DTypeFromV2Name(input.datatype).value_or(DType::kFloat32);
    header->inputs.push_back(TensorSpec{dtype, input.shape});
    header->input_names.push_back(AsHeaderString(input.name));
    if (any_shm) {
      header->input_shm.emplace_back();
      if (input.shm.used()) {
        header->input_shm.back().region = AsHeaderString(input.shm.region);
        header->input_shm.back().offset = input.shm.offset;
      }
    }
    if (!input.shm.used()) frames->push_back(std::move(input.data));
  }
  // The JSON leaves input_shm out when no input is in shared memory.
  bool inputs_in_shm = false;
  for (const ShmRef& ref : header->input_shm) inputs_in_shm = inputs_in_shm || ref.used();
  if (!inputs_in_shm) header->input_shm.clear();
  for (const V2RequestedOutput& output : request.outputs) {
    if (!output.shm.used()) continue;
    header->output_places.push_back(OutputPlace{
        AsHeaderString(output.name),
        ShmRef{AsHeaderString(output.shm.region), output.shm.offset, output.shm.byte_size}});
  }
  header->timeout_ms = request.timeout_ms > 0 ? request.timeout_ms : 0;
  header->priority = request.priority;
  // An infinite weight is JSON null, which the loop reads as none.
  header->client_weight =
      request.client_weight > 0 && std::isfinite(request.client_weight) ? request.client_weight : 0;
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
