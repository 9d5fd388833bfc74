// The v2 HTTP bodies (v2_http_codec.h). Requests are checked field by field with messages that say
// what was expected and what came; nesting is bounded before nlohmann parses (its parser and
// destructor recurse once per level). That DOM path answers only what the single-pass scanner
// (v2_request_scanner.h) gives up on, so it is where every request error is worded.
#include "supervisor/frontend/v2_http_codec.h"
#include "supervisor/frontend/v2_shm_parameters.h"

#include <charconv>
#include <unordered_set>
#include <utility>

#include "common/client_weights.h"
#include "common/int_text.h"
#include "common/protocol.h"
#include "common/tensor_spec.h"
#include "supervisor/frontend/frontend_endpoint.h"
#include "supervisor/frontend/v2_classification.h"
#include "supervisor/frontend/v2_json_data.h"
#include "supervisor/frontend/v2_request_scanner.h"

#ifndef TORCHFARM_VERSION
#define TORCHFARM_VERSION "unknown"
#endif

namespace torchfarm {
namespace {

using nlohmann::json;

// JSON text of a string that may hold invalid UTF-8 (a model name from a URL path).
std::string Quote(const std::string& text) {
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Appends Quote(text): printable ASCII without '"' or '\\' (every name people choose) as it is,
// anything else through nlohmann's escaping.
void AppendQuoted(const std::string& text, std::string* out) {
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f || c == '"' || c == '\\') {
      out->append(Quote(text));
      return;
    }
  }
  out->push_back('"');
  out->append(text);
  out->push_back('"');
}

// Appends a shape as json(shape).dump() writes it: [1,256].
void AppendShape(const std::vector<int64_t>& shape, std::string* out) {
  out->push_back('[');
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d > 0) out->push_back(',');
    AppendInt(out, shape[d]);
  }
  out->push_back(']');
}

std::string Got(const json& value) {
  std::string text = value.dump();
  if (text.size() > 64) text = text.substr(0, 61) + "...";
  return std::string(value.type_name()) + " " + text;
}

Status CheckKeys(const json& object, const std::string& where,
                 std::initializer_list<std::string_view> allowed) {
  for (const auto& item : object.items()) {
    bool known = false;
    for (std::string_view key : allowed) known = known || item.key() == key;
    if (known) continue;
    std::string list;
    for (std::string_view key : allowed) list += (list.empty() ? "" : ", ") + std::string(key);
    return InvalidArgument(where + ": unknown key '" + item.key() + "'; expected " + list);
  }
  return Status::Ok();
}

Status GetNonNegative(const json& value, const std::string& where, uint64_t max, uint64_t* out) {
  if (!value.is_number_integer() || (!value.is_number_unsigned() && value.get<int64_t>() < 0) ||
      value.get<uint64_t>() > max) {
    return InvalidArgument(where + ": expected an integer 0.." + std::to_string(max) + ", got " +
                           Got(value));
  }
  *out = value.get<uint64_t>();
  return Status::Ok();
}

Status GetShape(const json& input, const std::string& where, DType dtype,
                const std::string& datatype, std::vector<int64_t>* shape) {
  auto it = input.find("shape");
  if (it == input.end() || !it->is_array()) {
    return InvalidArgument(where + ".shape: expected an array of integers >= 0, got " +
                           (it == input.end() ? std::string("nothing") : Got(*it)));
  }
  if (it->size() > static_cast<size_t>(kMaxRank)) {
    return InvalidArgument(where + ".shape: expected at most " + std::to_string(kMaxRank) +
                           " dimensions, got " + std::to_string(it->size()));
  }
  for (size_t d = 0; d < it->size(); ++d) {
    uint64_t dim;
    Status s = GetNonNegative((*it)[d], where + ".shape[" + std::to_string(d) + "]",
                              uint64_t{1} << 62, &dim);
    if (!s.ok()) return s;
    shape->push_back(static_cast<int64_t>(dim));
  }
  if (!NumElements(*shape)) {
    return InvalidArgument(where + ".shape: " + ShapeToString(*shape) +
                           " has 2^62 or more elements");
  }
  if (!ByteSize(TensorSpec{dtype, *shape})) {
    return InvalidArgument(where + ".shape: " + datatype + " " + ShapeToString(*shape) +
                           " is 2^62 bytes or more");
  }
  return Status::Ok();
}

Status GetString(const json& object, const std::string& key, const std::string& where,
                 std::string* out) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
    return InvalidArgument(where + "." + key + ": expected a non-empty string, got " +
                           (it == object.end() ? std::string("nothing") : Got(*it)));
  }
  *out = it->get<std::string>();
  return Status::Ok();
}

// The binary section of the body and how far the inputs have read it.
struct BinaryCursor {
  const std::shared_ptr<const std::string>& body;
  size_t offset;
};

Status ParseInput(const json& input, size_t index, BinaryCursor* binary, V2Tensor* out) {
  const std::string where = "inputs[" + std::to_string(index) + "]";
  if (!input.is_object()) {
    return InvalidArgument(where + ": expected an object {\"name\", \"shape\", \"datatype\", "
                           "\"data\"}, got " + Got(input));
  }
  Status s = CheckKeys(input, where, {"name", "shape", "datatype", "data", "parameters"});
  if (s.ok()) s = GetString(input, "name", where, &out->name);
  if (s.ok()) s = GetString(input, "datatype", where, &out->datatype);
  DType dtype = DType::kFloat32;
  if (s.ok()) s = DTypeFromV2(out->datatype, where + ".datatype", &dtype);
  if (s.ok()) s = GetShape(input, where, dtype, out->datatype, &out->shape);
  if (!s.ok()) return s;
  const uint64_t bytes = *ByteSize(TensorSpec{dtype, out->shape});
  std::optional<uint64_t> binary_size;
  if (auto params = input.find("parameters"); params != input.end()) {
    if (!params->is_object()) {
      return InvalidArgument(where + ".parameters: expected an object, got " + Got(*params));
    }
    if (s = ParseV2ShmParameters(*params, where, &out->shm); !s.ok()) return s;
    if (out->shm.used()) {
      if (input.contains("data") || params->contains("binary_data_size")) {
        return InvalidArgument(where +
                               ": expected either parameters.shared_memory_region or "
                               "\"data\" / parameters.binary_data_size, got both");
      }
      // The bytes are in the region; ToFarmRequest checks shared_memory_byte_size.
      return Status::Ok();
    }
    if (auto size = params->find("binary_data_size"); size != params->end()) {
      uint64_t value;
      s = GetNonNegative(*size, where + ".parameters.binary_data_size", uint64_t{1} << 62, &value);
      if (!s.ok()) return s;
      binary_size = value;
    }
  }
  auto data = input.find("data");
  if (binary_size) {
    if (data != input.end()) {
      return InvalidArgument(where + ": expected either \"data\" or parameters.binary_data_size, "
                             "got both");
    }
    if (*binary_size != bytes) {
      return InvalidArgument(where + ": " + out->datatype + " " + ShapeToString(out->shape) +
                             " needs " + std::to_string(bytes) +
                             " bytes, parameters.binary_data_size is " +
                             std::to_string(*binary_size));
    }
    const size_t left = binary->body->size() - binary->offset;
    if (*binary_size > left) {
      return InvalidArgument(where + ": parameters.binary_data_size is " +
                             std::to_string(*binary_size) + " but only " + std::to_string(left) +
                             " bytes of binary data are left in the body");
    }
    out->data = V2BodySlice(binary->body, binary->offset, static_cast<size_t>(bytes));
    binary->offset += static_cast<size_t>(bytes);
    return Status::Ok();
  }
  if (data == input.end()) {
    return InvalidArgument(where + ": expected \"data\" or parameters.binary_data_size, got "
                           "neither");
  }
  return DecodeJsonData(*data, dtype, out->datatype, out->shape, where + ".data", &out->data);
}

Status ParseOutputs(const json& outputs, V2InferRequest* out) {
  if (!outputs.is_array()) {
    return InvalidArgument("outputs: expected an array of {\"name\"}, got " + Got(outputs));
  }
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string where = "outputs[" + std::to_string(i) + "]";
    const json& output = outputs[i];
    if (!output.is_object()) {
      return InvalidArgument(where + ": expected an object {\"name\"}, got " + Got(output));
    }
    V2RequestedOutput requested;
    Status s = CheckKeys(output, where, {"name", "parameters"});
    if (s.ok()) s = GetString(output, "name", where, &requested.name);
    if (!s.ok()) return s;
    if (!seen.insert(requested.name).second) {
      return InvalidArgument(where + ".name: '" + requested.name + "' is requested twice");
    }
    if (auto params = output.find("parameters"); params != output.end()) {
      if (!params->is_object()) {
        return InvalidArgument(where + ".parameters: expected an object, got " + Got(*params));
      }
      if (s = ParseV2ShmParameters(*params, where, &requested.shm); !s.ok()) return s;
      if (auto count = params->find("classification"); count != params->end()) {
        if (!count->is_number_integer() || count->get<int64_t>() < 1 ||
            count->get<int64_t>() > kMaxClassCount) {
          return InvalidArgument(where +
                                 ".parameters.classification: expected a class count in "
                                 "1.." +
                                 std::to_string(kMaxClassCount) + ", got " + Got(*count));
        }
        requested.class_count = count->get<int64_t>();
        if (requested.shm.used()) {
          return InvalidArgument(where +
                                 ": expected parameters.classification or "
                                 "parameters.shared_memory_region, got both (classification "
                                 "strings are not placed in shared memory)");
        }
      }
      if (auto binary = params->find("binary_data"); binary != params->end()) {
        if (!binary->is_boolean()) {
          return InvalidArgument(where + ".parameters.binary_data: expected true or false, got " +
                                 Got(*binary));
        }
        requested.binary = binary->get<bool>();
      }
    }
    out->outputs.push_back(std::move(requested));
  }
  return Status::Ok();
}

Status ParseParameters(const json& params, V2InferRequest* out) {
  if (!params.is_object()) {
    return InvalidArgument("parameters: expected an object, got " + Got(params));
  }
  if (auto binary = params.find("binary_data_output"); binary != params.end()) {
    if (!binary->is_boolean()) {
      return InvalidArgument("parameters.binary_data_output: expected true or false, got " +
                             Got(*binary));
    }
    out->binary_outputs = binary->get<bool>();
  }
  if (auto timeout = params.find("timeout"); timeout != params.end()) {
    uint64_t micros;
    Status s = GetNonNegative(*timeout, "parameters.timeout (microseconds)", uint64_t{1} << 62,
                              &micros);
    if (!s.ok()) return s;
    out->timeout_ms = static_cast<int64_t>((micros + kMicrosPerMilli - 1) / kMicrosPerMilli);
  }
  if (auto priority = params.find("priority"); priority != params.end()) {
    uint64_t value;
    Status s = GetNonNegative(*priority, "parameters.priority", UINT64_MAX, &value);
    if (!s.ok()) return s;
    out->priority = V2PriorityToWire(value);
  }
  if (auto weight = params.find("client_weight"); weight != params.end()) {
    Status s = ClientWeightFromJson(*weight, "parameters.client_weight", &out->client_weight);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status ParseBodyJson(std::string_view text, json* out) {
  if (!JsonNestingWithin(text, kMaxV2JsonDepth)) {
    return InvalidArgument("request body: expected JSON nested at most " +
                           std::to_string(kMaxV2JsonDepth) + " levels deep, got deeper");
  }
  try {
    *out = json::parse(text);
  } catch (const json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 9: ..."; a
    // number too large for a double is out_of_range.406, not a parse_error (found by the fuzzer).
    std::string what = e.what();
    if (size_t bracket = what.find("] "); bracket != std::string::npos) what.erase(0, bracket + 2);
    return InvalidArgument("request body: expected a JSON object, got invalid JSON (" + what +
                           ")");
  }
  if (!out->is_object()) {
    return InvalidArgument("request body: expected a JSON object, got " + Got(*out));
  }
  return Status::Ok();
}

}  // namespace

Status ParseInferenceHeaderLength(std::string_view value, size_t body_size, size_t* json_bytes) {
  uint64_t parsed = 0;
  auto result = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (value.empty() || result.ec != std::errc() || result.ptr != value.data() + value.size() ||
      parsed > body_size) {
    return InvalidArgument(std::string(kInferenceHeaderContentLength) + ": expected an integer 0.." +
                           std::to_string(body_size) + " (the body's size), got '" +
                           std::string(value.substr(0, 32)) + "'");
  }
  *json_bytes = static_cast<size_t>(parsed);
  return Status::Ok();
}

zmq::message_t V2BodySlice(const std::shared_ptr<const std::string>& body, size_t offset,
                           size_t size) {
  auto* keep = new std::shared_ptr<const std::string>(body);
  void* data = const_cast<char*>(body->data() + offset);  // ZeroMQ only reads it
  return zmq::message_t(
      data, size,
      [](void*, void* hint) { delete static_cast<std::shared_ptr<const std::string>*>(hint); },
      keep);
}

Status ParseV2InferRequest(std::shared_ptr<const std::string> body, size_t json_bytes,
                           V2InferRequest* out) {
  if (ParseV2InferRequestFast(body, json_bytes, out)) return Status::Ok();
  return ParseV2InferRequestJson(body, json_bytes, out);
}

Status ParseV2InferRequestJson(const std::shared_ptr<const std::string>& body, size_t json_bytes,
                               V2InferRequest* out) {
  if (json_bytes > body->size()) {
    return InvalidArgument("request body: the JSON part is " + std::to_string(json_bytes) +
                           " bytes but the body holds only " + std::to_string(body->size()));
  }
  json j;
  if (Status s = ParseBodyJson(std::string_view(*body).substr(0, json_bytes), &j); !s.ok()) {
    return s;
  }
  // Keys beyond these are ignored, as Triton and KServe do (KServe's client sends "model_name");
  // the ones used keep their type checks.
  if (auto id = j.find("id"); id != j.end()) {
    if (!id->is_string()) return InvalidArgument("id: expected a string, got " + Got(*id));
    out->id = id->get<std::string>();
  }
  if (auto params = j.find("parameters"); params != j.end()) {
    if (Status s = ParseParameters(*params, out); !s.ok()) return s;
  }
  auto inputs = j.find("inputs");
  if (inputs == j.end() || !inputs->is_array() || inputs->empty()) {
    return InvalidArgument("inputs: expected a non-empty array of tensors, got " +
                           (inputs == j.end() ? std::string("nothing") : Got(*inputs)));
  }
  BinaryCursor binary{body, json_bytes};
  out->inputs.clear();
  out->inputs.reserve(inputs->size());
  for (size_t i = 0; i < inputs->size(); ++i) {
    V2Tensor tensor;
    if (Status s = ParseInput((*inputs)[i], i, &binary, &tensor); !s.ok()) return s;
    out->inputs.push_back(std::move(tensor));
  }
  if (binary.offset != body->size()) {
    return InvalidArgument("request body: the inputs' binary_data_size add up to " +
                           std::to_string(binary.offset - json_bytes) + " bytes, but " +
                           std::to_string(body->size() - json_bytes) +
                           " bytes follow the JSON part");
  }
  if (auto outputs = j.find("outputs"); outputs != j.end()) {
    if (Status s = ParseOutputs(*outputs, out); !s.ok()) return s;
  }
  return Status::Ok();
}

V2HttpBody WriteV2InferResponse(const V2InferResponse& response) {
  V2HttpBody body;
  std::string& text = body.bytes;
  // One allocation for the usual reply: the JSON part and any binary outputs after it.
  size_t binary_bytes = 0;
  for (size_t k = 0; k < response.outputs.size(); ++k) {
    if (k < response.binary.size() && response.binary[k]) {
      binary_bytes += response.outputs[k].data.size();
    }
  }
  text.reserve(160 + 96 * response.outputs.size() + binary_bytes);
  text = "{\"model_name\":";
  AppendQuoted(response.model, &text);
  // Empty for a request that named no version: the farm's reply does not say which one ran it.
  if (!response.version.empty()) {
    text += ",\"model_version\":";
    AppendQuoted(response.version, &text);
  }
  if (!response.id.empty()) {
    text += ",\"id\":";
    AppendQuoted(response.id, &text);
  }
  text += ",\"outputs\":[";
  bool any_binary = false;
  for (size_t k = 0; k < response.outputs.size(); ++k) {
    const V2Tensor& output = response.outputs[k];
    const bool binary = k < response.binary.size() && response.binary[k];
    DType dtype = DType::kFloat32;
    const bool bytes = output.datatype == "BYTES";  // a classification (v2_classification.h)
    if (!bytes) DTypeFromV2(output.datatype, "outputs", &dtype);
    if (k > 0) text += ',';
    text += "{\"name\":";
    AppendQuoted(output.name, &text);
    text += ",\"datatype\":\"";
    text += output.datatype;
    text += "\",\"shape\":";
    AppendShape(output.shape, &text);
    if (output.shm.used()) {
      // The bytes are in the client's region: name, datatype and shape only. No "parameters":
      // Triton's own C++ HTTP client (perf_analyzer's) reads any output "parameters" as the
      // binary extension's and fails without binary_data_size.
      text += '}';
    } else if (binary) {
      any_binary = true;
      text += ",\"parameters\":{\"binary_data_size\":";
      AppendInt(&text, output.data.size());
      text += "}}";
    } else {
      text += ",\"data\":";
      if (bytes) {
        text += BytesDataJson(output).dump(-1, ' ', false, json::error_handler_t::replace);
      } else {
        AppendJsonData(dtype, output.data.data(), output.data.size() / DTypeSize(dtype), &text);
      }
      text += '}';
    }
  }
  text += "]}";
  if (!any_binary) return body;
  body.json_bytes = text.size();
  for (size_t k = 0; k < response.outputs.size(); ++k) {
    if (k < response.binary.size() && response.binary[k]) {
      text.append(static_cast<const char*>(response.outputs[k].data.data()),
                  response.outputs[k].data.size());
    }
  }
  return body;
}

std::string V2ErrorBody(std::string_view message) {
  return json{{"error", std::string(message)}}.dump(-1, ' ', false,
                                                    json::error_handler_t::replace);
}

std::string V2ServerMetadataBody(bool system_shared_memory) {
  json extensions = {"binary_tensor_data"};
  for (const char* extension : kV2Extensions) extensions.push_back(extension);
  if (system_shared_memory) extensions.push_back(kV2SystemShmExtension);
  return json{
      {"name", "torchfarm"}, {"version", TORCHFARM_VERSION}, {"extensions", std::move(extensions)}}
      .dump();
}

std::string V2ModelMetadataBody(const json& model) {
  json out = json::object();
  for (const char* key : {"name", "versions", "platform", "inputs", "outputs"}) {
    if (auto it = model.find(key); it != model.end()) out[key] = *it;
  }
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace torchfarm
