#include "supervisor/frontend/grpc_service.h"
#include "supervisor/frontend/v2_shm_parameters.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include <google/protobuf/util/json_util.h>

#include "common/client_weights.h"
#include "common/tensor_spec.h"
#include "supervisor/frontend/frontend_endpoint.h"
#include "supervisor/frontend/v2_classification.h"

#ifndef TORCHFARM_VERSION
#define TORCHFARM_VERSION "unknown"
#endif

// Typed contents are copied element by element into the tensor's bytes; the wire format is
// little-endian, and so must the host be for those copies to be the wire's bytes.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "typed contents assume a little-endian host");

namespace torchfarm {
namespace {

using inference::InferParameter;
using inference::InferTensorContents;
using inference::ModelInferRequest;

// The typed field a datatype's values travel in, and how many values each field holds, so a
// request that fills the wrong field is told which one it should have used.
const char* ContentsFieldFor(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return "bool_contents";
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
      return "int_contents";
    case DType::kInt64:
      return "int64_contents";
    case DType::kUInt8:
      return "uint_contents";
    case DType::kFloat32:
      return "fp32_contents";
    case DType::kFloat64:
      return "fp64_contents";
    case DType::kFloat16:
    case DType::kBFloat16:
      return nullptr;
  }
  return nullptr;
}

size_t ContentsFieldSize(const InferTensorContents& c, const std::string& field) {
  if (field == "bool_contents") return c.bool_contents_size();
  if (field == "int_contents") return c.int_contents_size();
  if (field == "int64_contents") return c.int64_contents_size();
  if (field == "uint_contents") return c.uint_contents_size();
  if (field == "uint64_contents") return c.uint64_contents_size();
  if (field == "fp32_contents") return c.fp32_contents_size();
  if (field == "fp64_contents") return c.fp64_contents_size();
  if (field == "bytes_contents") return c.bytes_contents_size();
  return 0;
}

constexpr const char* kAllContentsFields[] = {"bool_contents", "int_contents",    "int64_contents",
                                              "uint_contents", "uint64_contents", "fp32_contents",
                                              "fp64_contents", "bytes_contents"};

// Copies `values` (already the element type) into `out`.
template <typename T, typename Field>
void CopySame(const Field& values, zmq::message_t* out) {
  *out = zmq::message_t(values.size() * sizeof(T));
  if (values.size() > 0) std::memcpy(out->data(), values.data(), values.size() * sizeof(T));
}

// Narrows each value to T, refusing one outside T's range.
template <typename T, typename Field>
Status CopyNarrowed(const Field& values, const std::string& where, zmq::message_t* out) {
  *out = zmq::message_t(values.size() * sizeof(T));
  auto* dst = static_cast<T*>(out->data());
  for (int i = 0; i < values.size(); ++i) {
    const auto v = values.Get(i);
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
      return InvalidArgument(where + ": value " + std::to_string(v) + " at element " +
                             std::to_string(i) + " does not fit the datatype");
    }
    dst[i] = static_cast<T>(v);
  }
  return Status::Ok();
}

Status TypedContentsToBytes(const InferTensorContents& c, DType dtype, const std::string& where,
                            zmq::message_t* out) {
  switch (dtype) {
    case DType::kFloat32:
      CopySame<float>(c.fp32_contents(), out);
      return Status::Ok();
    case DType::kFloat64:
      CopySame<double>(c.fp64_contents(), out);
      return Status::Ok();
    case DType::kInt64:
      CopySame<int64_t>(c.int64_contents(), out);
      return Status::Ok();
    case DType::kInt32:
      CopySame<int32_t>(c.int_contents(), out);
      return Status::Ok();
    case DType::kInt16:
      return CopyNarrowed<int16_t>(c.int_contents(), where, out);
    case DType::kInt8:
      return CopyNarrowed<int8_t>(c.int_contents(), where, out);
    case DType::kUInt8:
      return CopyNarrowed<uint8_t>(c.uint_contents(), where, out);
    case DType::kBool: {
      *out = zmq::message_t(static_cast<size_t>(c.bool_contents_size()));
      auto* dst = static_cast<uint8_t*>(out->data());
      for (int i = 0; i < c.bool_contents_size(); ++i) dst[i] = c.bool_contents(i) ? 1 : 0;
      return Status::Ok();
    }
    case DType::kFloat16:
    case DType::kBFloat16:
      break;
  }
  return InvalidArgument(where + ": " + std::string(V2DatatypeName(dtype)) +
                         " has no typed contents field; send it in raw_input_contents");
}

// One input's bytes from its typed `contents`: the datatype's field with one value per element,
// every other field empty.
Status InputFromContents(const ModelInferRequest::InferInputTensor& input, const std::string& where,
                         V2Tensor* tensor) {
  DType dtype;
  if (Status s = DTypeFromV2(input.datatype(), where, &dtype); !s.ok()) return s;
  const char* field = ContentsFieldFor(dtype);
  if (field == nullptr) {
    return InvalidArgument(where + ": " + input.datatype() +
                           " has no typed contents field; send it in raw_input_contents");
  }
  auto elements = NumElements(tensor->shape);
  if (!elements) {
    return InvalidArgument(where + ": shape " + ShapeToString(tensor->shape) +
                           " is not a tensor's shape (negative or too large)");
  }
  const InferTensorContents& contents = input.contents();
  for (const char* other : kAllContentsFields) {
    if (std::strcmp(other, field) != 0 && ContentsFieldSize(contents, other) > 0) {
      return InvalidArgument(where + ": contents." + other + " given for datatype " +
                             input.datatype() + ", which travels in contents." + field);
    }
  }
  const size_t got = ContentsFieldSize(contents, field);
  if (got != *elements) {
    return InvalidArgument(where + ": " + input.datatype() + " " + ShapeToString(tensor->shape) +
                           " needs " + std::to_string(*elements) + " values in contents." + field +
                           ", got " + std::to_string(got));
  }
  return TypedContentsToBytes(contents, dtype, where, &tensor->data);
}

// A parameter Triton's clients send as int64_param or uint64_param: its value, or
// INVALID_ARGUMENT naming what came.
Status NonNegativeParameter(const InferParameter& value, const std::string& where, uint64_t* out) {
  const std::string expected =
      where + ": expected a non-negative int64_param or uint64_param, got ";
  switch (value.parameter_choice_case()) {
    case InferParameter::kInt64Param:
      if (value.int64_param() < 0) {
        return InvalidArgument(expected + "int64_param " + std::to_string(value.int64_param()));
      }
      *out = static_cast<uint64_t>(value.int64_param());
      return Status::Ok();
    case InferParameter::kUint64Param:
      *out = value.uint64_param();
      return Status::Ok();
    case InferParameter::kBoolParam:
      return InvalidArgument(expected + "bool_param");
    case InferParameter::kStringParam:
      return InvalidArgument(expected + "string_param");
    case InferParameter::kDoubleParam:
      return InvalidArgument(expected + "double_param");
    default:
      break;
  }
  return InvalidArgument(expected + "no value of those kinds");
}

// parameters.client_weight as double_param, int64_param or uint64_param, 0.01..100.
Status ClientWeightParameter(const InferParameter& value, double* out) {
  const std::string where = "parameters.client_weight";
  switch (value.parameter_choice_case()) {
    case InferParameter::kDoubleParam:
      return ClientWeightFromJson(value.double_param(), where, out);
    case InferParameter::kInt64Param:
      return ClientWeightFromJson(value.int64_param(), where, out);
    case InferParameter::kUint64Param:
      return ClientWeightFromJson(value.uint64_param(), where, out);
    default:
      break;
  }
  const char* got = value.parameter_choice_case() == InferParameter::kBoolParam     ? "bool_param"
                    : value.parameter_choice_case() == InferParameter::kStringParam ? "string_param"
                                                                                    : "no value";
  return InvalidArgument(where +
                         ": expected a double_param, int64_param or uint64_param in "
                         "0.01..100, got " +
                         got);
}

Status ReadParameters(const ModelInferRequest& request, V2InferRequest* out) {
  for (const auto& [key, value] : request.parameters()) {
    if (key == "timeout") {
      // Triton's "timeout" is in microseconds; the farm counts milliseconds (rounded up, so a
      // short timeout never becomes "none").
      uint64_t micros = 0;
      if (Status s = NonNegativeParameter(value, "parameters.timeout (µs)", &micros); !s.ok()) {
        return s;
      }
      micros = std::min<uint64_t>(micros, uint64_t{1} << 62);
      out->timeout_ms = static_cast<int64_t>(micros / 1000 + (micros % 1000 != 0 ? 1 : 0));
    } else if (key == "priority") {
      uint64_t priority = 0;
      if (Status s = NonNegativeParameter(value, "parameters.priority", &priority); !s.ok()) {
        return s;
      }
      out->priority = V2PriorityToWire(priority);
    } else if (key == "client_weight") {
      if (Status s = ClientWeightParameter(value, &out->client_weight); !s.ok()) return s;
    }
    // Other parameters (e.g. the HTTP binary extension's) mean nothing to the farm.
  }
  return Status::Ok();
}

// Triton's shared-memory parameters of one tensor, as the JSON ParseV2ShmParameters reads (the
// same parser as HTTP's): string_param, int64_param, uint64_param, bool_param and double_param
// become the JSON value of that kind, so a wrong kind is refused with what came.
Status ShmPlaceFromProto(const google::protobuf::Map<std::string, InferParameter>& parameters,
                         const std::string& where, V2ShmPlace* out) {
  nlohmann::json params = nlohmann::json::object();
  for (const char* key :
       {"shared_memory_region", "shared_memory_offset", "shared_memory_byte_size"}) {
    auto it = parameters.find(key);
    if (it == parameters.end()) continue;
    const InferParameter& value = it->second;
    switch (value.parameter_choice_case()) {
      case InferParameter::kStringParam:
        params[key] = value.string_param();
        break;
      case InferParameter::kInt64Param:
        params[key] = value.int64_param();
        break;
      case InferParameter::kUint64Param:
        params[key] = value.uint64_param();
        break;
      case InferParameter::kBoolParam:
        params[key] = value.bool_param();
        break;
      case InferParameter::kDoubleParam:
        params[key] = value.double_param();
        break;
      default:
        params[key] = nullptr;
        break;
    }
  }
  return ParseV2ShmParameters(params, where, out);
}

}  // namespace

grpc::StatusCode GrpcCodeOf(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return grpc::StatusCode::OK;
    case StatusCode::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case StatusCode::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case StatusCode::kResourceExhausted:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case StatusCode::kDeadlineExceeded:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case StatusCode::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case StatusCode::kInternal:
      return grpc::StatusCode::INTERNAL;
  }
  return grpc::StatusCode::INTERNAL;
}

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(GrpcCodeOf(status.code()), status.message());
}

Status V2RequestFromProto(const ModelInferRequest& request, V2InferRequest* out) {
  *out = V2InferRequest{};
  out->model = request.model_name();
  out->version = request.model_version();
  out->id = request.id();
  if (Status s = ReadParameters(request, out); !s.ok()) return s;
  // Inputs in system shared memory have no raw_input_contents entry (as Triton and tritonclient).
  std::vector<V2ShmPlace> places(static_cast<size_t>(request.inputs_size()));
  int in_shm = 0;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& input = request.inputs(i);
    if (input.parameters().empty()) continue;  // no region: the usual input, nothing to word
    const std::string where = V2InputWhere(static_cast<size_t>(i), input.name());
    if (Status s = ShmPlaceFromProto(input.parameters(), where, &places[i]); !s.ok()) return s;
    if (places[i].used() && input.has_contents()) {
      return InvalidArgument(where +
                             ": expected either parameters.shared_memory_region or "
                             "contents, got both");
    }
    in_shm += places[i].used() ? 1 : 0;
  }
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != request.inputs_size() - in_shm) {
    return InvalidArgument("raw_input_contents holds " +
                           std::to_string(request.raw_input_contents_size()) + " entries for " +
                           std::to_string(request.inputs_size() - in_shm) +
                           " inputs not in shared memory; it needs one per such input");
  }
  out->inputs.reserve(request.inputs_size());
  for (int i = 0, next_raw = 0; i < request.inputs_size(); ++i) {
    const auto& input = request.inputs(i);
    // Worded only for an error or the contents path, which names elements in its own.
    const auto where = [&] { return V2InputWhere(static_cast<size_t>(i), input.name()); };
    V2Tensor tensor;
    tensor.name = input.name();
    tensor.datatype = input.datatype();
    tensor.shape.assign(input.shape().begin(), input.shape().end());
    tensor.shm = places[i];
    if (tensor.shm.used()) {
      // The bytes are in the region; ToFarmRequest checks shared_memory_byte_size.
    } else if (raw) {
      if (input.has_contents()) {
        return InvalidArgument(where() +
                               ": has contents, but the request uses "
                               "raw_input_contents (use one or the other)");
      }
      const std::string& bytes = request.raw_input_contents(next_raw++);
      tensor.data = zmq::message_t(bytes.data(), bytes.size());
    } else if (Status s = InputFromContents(input, where(), &tensor); !s.ok()) {
      return s;
    }
    out->inputs.push_back(std::move(tensor));
  }
  for (int i = 0; i < request.outputs_size(); ++i) {
    const auto& output = request.outputs(i);
    V2RequestedOutput requested{output.name(), false};
    if (auto it = output.parameters().find("classification"); it != output.parameters().end()) {
      const auto& p = it->second;
      const bool integer = p.parameter_choice_case() == inference::InferParameter::kInt64Param ||
                           p.parameter_choice_case() == inference::InferParameter::kUint64Param;
      const int64_t count =
          p.parameter_choice_case() == inference::InferParameter::kInt64Param
              ? p.int64_param()
              : static_cast<int64_t>(std::min<uint64_t>(p.uint64_param(), kMaxClassCount + 1));
      if (!integer || count < 1 || count > kMaxClassCount) {
        return InvalidArgument("outputs[" + std::to_string(i) +
                               "].parameters.classification: expected an int64_param class count "
                               "in 1.." +
                               std::to_string(kMaxClassCount));
      }
      requested.class_count = count;
    }
    const std::string where = "outputs[" + std::to_string(i) + "]";
    if (Status s = ShmPlaceFromProto(output.parameters(), where, &requested.shm); !s.ok()) {
      return s;
    }
    if (requested.shm.used() && requested.class_count > 0) {
      return InvalidArgument(where +
                             ": expected parameters.classification or "
                             "parameters.shared_memory_region, got both (classification strings "
                             "are not placed in shared memory)");
    }
    out->outputs.push_back(std::move(requested));
  }
  return Status::Ok();
}

void V2ResponseToProto(const V2InferResponse& response, inference::ModelInferResponse* out) {
  out->set_model_name(response.model);
  out->set_model_version(response.version);
  out->set_id(response.id);
  for (const V2Tensor& tensor : response.outputs) {
    auto* output = out->add_outputs();
    output->set_name(tensor.name);
    output->set_datatype(tensor.datatype);
    for (int64_t dim : tensor.shape) output->add_shape(dim);
    if (tensor.shm.used()) {
      // As Triton: the bytes are in the client's region; the output says where, and its
      // raw_output_contents entry is empty so the others keep their index.
      auto& params = *output->mutable_parameters();
      params["shared_memory_region"].set_string_param(tensor.shm.region);
      params["shared_memory_offset"].set_int64_param(static_cast<int64_t>(tensor.shm.offset));
      params["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(tensor.shm.byte_size));
    }
    out->add_raw_output_contents(static_cast<const char*>(tensor.data.data()), tensor.data.size());
  }
}

Status FindModelInMeta(const nlohmann::json& meta, const std::string& name,
                       const std::string& version, const nlohmann::json** out) {
  auto models = meta.find("models");
  if (models == meta.end() || !models->is_array()) {
    return Internal("the farm's metadata reply has no \"models\" list");
  }
  return FindModelVersionInMeta(meta, name, version, out);
}

Status ModelMetadataFromJson(const nlohmann::json& model, inference::ModelMetadataResponse* out) {
  try {
    out->set_name(model.at("name").get<std::string>());
    for (const auto& v : model.value("versions", nlohmann::json::array())) {
      out->add_versions(v.get<std::string>());
    }
    out->set_platform(model.value("platform", ""));
    for (const char* list : {"inputs", "outputs"}) {
      for (const auto& tensor : model.value(list, nlohmann::json::array())) {
        auto* t = std::string(list) == "inputs" ? out->add_inputs() : out->add_outputs();
        t->set_name(tensor.at("name").get<std::string>());
        t->set_datatype(tensor.at("datatype").get<std::string>());
        for (const auto& dim : tensor.at("shape")) t->add_shape(dim.get<int64_t>());
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return Internal(std::string("the farm's model metadata is malformed: ") + e.what());
  }
  return Status::Ok();
}

void FillServerMetadata(inference::ServerMetadataResponse* out, bool system_shared_memory) {
  out->set_name("torchfarm");
  out->set_version(TORCHFARM_VERSION);
  for (const char* extension : kV2Extensions) out->add_extensions(extension);
  if (system_shared_memory) out->add_extensions(kV2SystemShmExtension);
}

Status LogSettingsFromProto(const inference::LogSettingsRequest& request, nlohmann::json* out) {
  using Value = inference::LogSettingsRequest::SettingValue;
  *out = nlohmann::json::object();
  for (const auto& [key, value] : request.settings()) {
    switch (value.parameter_choice_case()) {
      case Value::kBoolParam:
        (*out)[key] = value.bool_param();
        break;
      case Value::kUint32Param:
        (*out)[key] = value.uint32_param();
        break;
      case Value::kStringParam:
        (*out)[key] = value.string_param();
        break;
      default:
        return InvalidArgument("settings['" + key.substr(0, 100) +
                               "']: expected a bool_param, uint32_param or string_param");
    }
  }
  return Status::Ok();
}

void LogSettingsToProto(const nlohmann::json& settings, inference::LogSettingsResponse* out) {
  auto& map = *out->mutable_settings();
  for (const auto& [key, value] : settings.items()) {
    if (value.is_boolean()) {
      map[key].set_bool_param(value.get<bool>());
    } else if (value.is_number_unsigned()) {
      map[key].set_uint32_param(value.get<uint32_t>());
    } else if (value.is_string()) {
      map[key].set_string_param(value.get<std::string>());
    }
  }
}

Status MessageFromJson(const nlohmann::json& json, google::protobuf::Message* out) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto status = google::protobuf::util::JsonStringToMessage(
      json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), out, options);
  if (!status.ok()) {
    return Internal("cannot write the " + out->GetDescriptor()->name() +
                    " message: " + std::string(status.message()));
  }
  return Status::Ok();
}

}  // namespace torchfarm
