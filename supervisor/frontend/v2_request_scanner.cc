// The v2 infer request scanner (v2_request_scanner.h). Every rule here mirrors one of
// ParseV2InferRequestJson (v2_http_codec.cc) and v2_json_data.cc; where mirroring a rule exactly
// would take more than a few lines (escapes, UTF-8, integers past 64 bits, underflow), the scanner
// gives up instead and the DOM path answers. Numbers are classified as nlohmann's lexer does, so
// "-0" is the integer 0 and 5 is no float: that decides both the type checks and the values.
#include "supervisor/frontend/v2_request_scanner.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "common/client_weights.h"
#include "common/tensor_spec.h"
#include "supervisor/frontend/json_cursor.h"
#include "supervisor/frontend/v2_classification.h"
#include "supervisor/frontend/v2_http_codec.h"
#include "supervisor/frontend/v2_json_data.h"

namespace torchfarm {
namespace {

constexpr uint64_t kMaxDimension = uint64_t{1} << 62;  // GetShape's and binary_data_size's bound

// Calls `field(key)` for each key of an object; a repeated key among `known` (the DOM path lets
// the last one win) or a false from `field` gives false. `known` has at most 32 keys.
template <typename Field>
bool ScanObject(JsonCursor& in, std::initializer_list<std::string_view> known, Field&& field) {
  if (!in.Open('{')) return false;
  if (in.Close('}')) return true;
  uint32_t seen = 0;
  do {
    std::string_view key;
    if (!in.Key(&key)) return false;
    uint32_t bit = 1;
    for (std::string_view name : known) {
      if (key == name) {
        if (seen & bit) return false;
        seen |= bit;
        break;
      }
      bit <<= 1;
    }
    if (!field(key)) return false;
  } while (in.Take(','));
  return in.Close('}');
}

// Triton's shared-memory parameters, and the rest of a tensor's "parameters" the parser reads.
struct TensorParameters {
  std::optional<std::string_view> region;
  std::optional<JsonNumber> byte_size;
  std::optional<JsonNumber> offset;
  std::optional<JsonNumber> binary_data_size;
  std::optional<JsonNumber> classification;
  std::optional<bool> binary_data;
};

bool ScanTensorParameters(JsonCursor& in, bool output, TensorParameters* out) {
  const std::initializer_list<std::string_view> known = {
      "shared_memory_region", "shared_memory_byte_size", "shared_memory_offset",
      "binary_data_size",     "classification",          "binary_data"};
  return ScanObject(in, known, [&](std::string_view key) {
    JsonNumber number;
    if (key == "shared_memory_region") {
      std::string_view region;
      if (!in.String(&region)) return false;
      out->region = region;
    } else if (key == "shared_memory_byte_size" || key == "shared_memory_offset" ||
               (key == "binary_data_size" && !output) || (key == "classification" && output)) {
      if (!in.Numeric(&number)) return false;
      (key == "shared_memory_byte_size" ? out->byte_size
       : key == "shared_memory_offset"  ? out->offset
       : key == "binary_data_size"      ? out->binary_data_size
                                        : out->classification) = number;
    } else if (key == "binary_data" && output) {
      bool value;
      if (!in.Boolean(&value)) return false;
      out->binary_data = value;
    } else {
      return in.SkipValue();  // ignored, as ParseV2ShmParameters and the DOM path ignore it
    }
    return true;
  });
}

// ParseV2ShmParameters' rules; `place` stays unused without a region.
bool ShmPlaceOf(const TensorParameters& params, V2ShmPlace* place) {
  if (!params.region) return !params.byte_size && !params.offset;
  if (params.region->empty() || !params.byte_size) return false;
  if (!params.byte_size->NonNegative(kMaxDimension, &place->byte_size) || place->byte_size < 1) {
    return false;
  }
  if (params.offset && !params.offset->NonNegative(kMaxDimension, &place->offset)) return false;
  place->region = std::string(*params.region);
  return true;
}

// Writes the leaves of a "data" array into a tensor's bytes, checking each as LeafWriter does.
class DataScanner {
 public:
  DataScanner(JsonCursor& in, DType dtype, uint64_t count, char* dst)
      : in_(in), dtype_(dtype), left_(count), dst_(dst) {}

  // The array at the cursor, any nesting, exactly `count` leaves.
  bool Scan() { return in_.Peek('[') && Value() && left_ == 0; }

 private:
  bool Value() {
    if (!in_.Peek('[')) return Leaf();
    if (!in_.Open('[')) return false;
    if (in_.Close(']')) return true;
    do {
      // A float32 element read on the spot (most JSON tensors' leaves); any other leaf straight
      // away (the usual flat array), a nested array through Value.
      if (FloatLeaf()) continue;
      if (!(in_.Peek('[') ? Value() : Leaf())) return false;
    } while (in_.Take(','));
    return in_.Close(']');
  }

  // A float32 leaf that DecimalForFloat reads and that is in range, stored; false, with nothing
  // read, for anything else, which Leaf reads (and refuses, where it is refused) as before.
  bool FloatLeaf() {
    if (dtype_ != DType::kFloat32 || left_ == 0) return false;
    const char* start = in_.position();
    double value;
    if (!in_.DecimalForFloat(&value)) return false;
    if (!EncodeJsonFloat32(value, dst_)) {
      in_.Seek(start);
      return false;
    }
    dst_ += sizeof(float);
    --left_;
    return true;
  }

  template <typename T>
  bool PutInteger(const JsonNumber& number) {
    constexpr auto kMin = std::numeric_limits<T>::min();
    constexpr auto kMax = std::numeric_limits<T>::max();
    T value;
    if (number.kind == JsonNumber::kUnsigned) {
      if (number.unsigned_value > static_cast<uint64_t>(kMax)) return false;
      value = static_cast<T>(number.unsigned_value);
    } else if (number.kind == JsonNumber::kSigned) {
      const int64_t v = number.signed_value;
      if (v < static_cast<int64_t>(kMin) ||
          (v >= 0 && static_cast<uint64_t>(v) > static_cast<uint64_t>(kMax))) {
        return false;
      }
      value = static_cast<T>(v);
    } else {
      return false;
    }
    std::memcpy(dst_, &value, sizeof(T));
    dst_ += sizeof(T);
    return true;
  }

  bool Leaf() {
    if (left_ == 0) return false;  // more leaves than the shape holds
    --left_;
    if (dtype_ == DType::kBool) {
      bool value;
      if (!in_.Boolean(&value)) return false;
      *dst_++ = value ? 1 : 0;
      return true;
    }
    JsonNumber number;
    if (!in_.Numeric(&number)) return false;
    switch (dtype_) {
      case DType::kInt8:
        return PutInteger<int8_t>(number);
      case DType::kInt16:
        return PutInteger<int16_t>(number);
      case DType::kInt32:
        return PutInteger<int32_t>(number);
      case DType::kInt64:
        return PutInteger<int64_t>(number);
      case DType::kUInt8:
        return PutInteger<uint8_t>(number);
      default:
        break;
    }
    double value;
    if (dtype_ == DType::kFloat32) {
      if (!number.ToDoubleForFloat(&value) || !EncodeJsonFloat32(value, dst_)) return false;
      dst_ += sizeof(float);
      return true;
    }
    if (!number.ToDouble(&value) || !EncodeJsonFloat(dtype_, value, dst_)) return false;
    dst_ += DTypeSize(dtype_);
    return true;
  }

  JsonCursor& in_;
  DType dtype_;
  uint64_t left_;
  char* dst_;
};

// What an input object said, before its rules are applied.
struct InputFields {
  std::optional<std::string_view> name;
  std::optional<std::string_view> datatype;
  std::optional<std::vector<int64_t>> shape;
  std::optional<TensorParameters> parameters;
  bool have_data = false;
  // "data" came before "datatype" or "shape": where its value starts, read at the object's end.
  const char* deferred_data = nullptr;
  int deferred_depth = 0;
  std::optional<zmq::message_t> data;  // "data" read where it came
};

bool ScanShape(JsonCursor& in, std::vector<int64_t>* shape) {
  if (!in.Open('[')) return false;
  if (in.Close(']')) return true;
  do {
    JsonNumber number;
    uint64_t dimension;
    if (shape->size() >= static_cast<size_t>(kMaxRank) || !in.Numeric(&number) ||
        !number.NonNegative(kMaxDimension, &dimension)) {
      return false;
    }
    shape->push_back(static_cast<int64_t>(dimension));
  } while (in.Take(','));
  return in.Close(']');
}

// The scan of one request, with the binary section's read offset.
class RequestScanner {
 public:
  RequestScanner(const std::shared_ptr<const std::string>& body, size_t json_bytes)
      : body_(body),
        in_(std::string_view(*body).substr(0, json_bytes)),
        binary_offset_(json_bytes) {}

  bool Scan() {
    bool have_inputs = false;
    const bool read =
        ScanObject(in_, {"id", "parameters", "inputs", "outputs"}, [&](std::string_view key) {
          if (key == "id") {
            std::string_view id;
            if (!in_.String(&id)) return false;
            id_ = std::string(id);
            return true;
          }
          if (key == "parameters") return ScanParameters();
          if (key == "inputs") return have_inputs = ScanInputs();
          if (key == "outputs") return ScanOutputs();
          return in_
              .SkipValue();  // KServe's "model_name" and others: ignored, as the DOM path does
        });
    return read && in_.AtEnd() && have_inputs && binary_offset_ == body_->size();
  }

  // Moves the result into *out as the DOM path leaves it.
  void MoveTo(V2InferRequest* out) {
    if (id_) out->id = std::move(*id_);
    if (binary_outputs_) out->binary_outputs = *binary_outputs_;
    if (timeout_ms_) out->timeout_ms = *timeout_ms_;
    if (priority_) out->priority = *priority_;
    if (client_weight_) out->client_weight = *client_weight_;
    out->inputs = std::move(inputs_);
    for (V2RequestedOutput& output : outputs_) out->outputs.push_back(std::move(output));
  }

 private:
  bool ScanParameters() {
    return ScanObject(
        in_, {"binary_data_output", "timeout", "priority", "client_weight"},
        [&](std::string_view key) {
          JsonNumber number;
          uint64_t value;
          if (key == "binary_data_output") {
            bool binary;
            if (!in_.Boolean(&binary)) return false;
            binary_outputs_ = binary;
          } else if (key == "timeout") {
            if (!in_.Numeric(&number) || !number.NonNegative(kMaxDimension, &value)) return false;
            timeout_ms_ = static_cast<int64_t>((value + kMicrosPerMilli - 1) / kMicrosPerMilli);
          } else if (key == "priority") {
            if (!in_.Numeric(&number) || !number.NonNegative(UINT64_MAX, &value)) return false;
            priority_ = V2PriorityToWire(value);
          } else if (key == "client_weight") {
            double weight;
            if (!in_.Numeric(&number) || !number.ToDouble(&weight) || !std::isfinite(weight) ||
                weight < kMinClientWeight || weight > kMaxClientWeight) {
              return false;
            }
            client_weight_ = weight;
          } else {
            return in_.SkipValue();
          }
          return true;
        });
  }

  bool ScanInputs() {
    if (!in_.Open('[') || in_.Peek(']')) return false;  // an empty list is the DOM path's error
    do {
      V2Tensor tensor;
      if (!ScanInput(&tensor)) return false;
      inputs_.push_back(std::move(tensor));
    } while (in_.Take(','));
    return in_.Close(']');
  }

  bool ScanInput(V2Tensor* tensor) {
    InputFields fields;
    const bool read = ScanObject(
        in_, {"name", "datatype", "shape", "data", "parameters"}, [&](std::string_view key) {
          std::string_view text;
          if (key == "name" || key == "datatype") {
            if (!in_.String(&text) || text.empty()) return false;
            (key == "name" ? fields.name : fields.datatype) = text;
            return true;
          }
          if (key == "shape") return in_.Peek('[') && ScanShape(in_, &fields.shape.emplace());
          if (key == "data") return ScanDataField(&fields);
          if (key == "parameters") {
            return in_.Peek('{') && ScanTensorParameters(in_, false, &fields.parameters.emplace());
          }
          return false;  // CheckKeys refuses any other key
        });
    return read && FinishInput(fields, tensor);
  }

  // The datatype and the shape's byte size, when both are there and valid.
  static bool TypeOf(const InputFields& fields, DType* dtype, uint64_t* bytes) {
    if (!fields.datatype || !fields.shape) return false;
    const std::optional<DType> type = DTypeFromV2Name(*fields.datatype);
    if (!type || *type == DType::kBytes || !NumElements(*fields.shape)) return false;
    const std::optional<uint64_t> size = ByteSize(TensorSpec{*type, *fields.shape});
    if (!size) return false;
    *dtype = *type;
    *bytes = *size;
    return true;
  }

  // Reads "data" at once when datatype and shape came before it (what clients send), else skips
  // it and leaves it for FinishInput.
  bool ScanDataField(InputFields* fields) {
    fields->have_data = true;
    DType dtype;
    uint64_t bytes;
    if (TypeOf(*fields, &dtype, &bytes)) {
      return ScanData(dtype, *NumElements(*fields->shape), bytes, &fields->data.emplace());
    }
    in_.SkipBlanks();
    fields->deferred_data = in_.position();
    fields->deferred_depth = in_.depth();
    return in_.SkipValue();
  }

  // ParseInput's rules on what the object said.
  bool FinishInput(InputFields& fields, V2Tensor* tensor) {
    DType dtype;
    uint64_t bytes;
    if (!fields.name || !TypeOf(fields, &dtype, &bytes)) return false;
    tensor->name = std::string(*fields.name);
    tensor->datatype = std::string(*fields.datatype);
    tensor->shape = std::move(*fields.shape);
    const TensorParameters params = fields.parameters.value_or(TensorParameters{});
    if (!ShmPlaceOf(params, &tensor->shm)) return false;
    if (tensor->shm.used()) return !fields.have_data && !params.binary_data_size;
    if (params.binary_data_size) {
      uint64_t size;
      if (fields.have_data || !params.binary_data_size->NonNegative(kMaxDimension, &size) ||
          size != bytes || size > body_->size() - binary_offset_) {
        return false;
      }
      tensor->data = V2BodySlice(body_, binary_offset_, static_cast<size_t>(size));
      binary_offset_ += static_cast<size_t>(size);
      return true;
    }
    if (!fields.have_data) return false;
    if (fields.deferred_data) {
      const char* resume = in_.position();
      const int depth = in_.depth();
      in_.Seek(fields.deferred_data);
      in_.set_depth(fields.deferred_depth);
      if (!ScanData(dtype, *NumElements(tensor->shape), bytes, &fields.data.emplace())) {
        return false;
      }
      in_.Seek(resume);
      in_.set_depth(depth);
    }
    tensor->data = std::move(*fields.data);
    return true;
  }

  // `count` elements of `dtype` (`bytes` in all) from the "data" array at the cursor.
  bool ScanData(DType dtype, uint64_t count, uint64_t bytes, zmq::message_t* out) {
    // Each element takes a byte of JSON at least: no allocation past what the text could fill.
    if (count > in_.Left()) return false;
    zmq::message_t data(static_cast<size_t>(bytes));
    DataScanner scanner(in_, dtype, count, static_cast<char*>(data.data()));
    if (!scanner.Scan()) return false;
    *out = std::move(data);
    return true;
  }

  bool ScanOutputs() {
    if (!in_.Open('[')) return false;
    if (in_.Close(']')) return true;
    do {
      V2RequestedOutput output;
      if (outputs_.size() >= kMaxScannedOutputs || !ScanOutput(&output)) return false;
      for (const V2RequestedOutput& earlier : outputs_) {
        if (earlier.name == output.name) return false;  // requested twice
      }
      outputs_.push_back(std::move(output));
    } while (in_.Take(','));
    return in_.Close(']');
  }

  bool ScanOutput(V2RequestedOutput* output) {
    std::optional<std::string_view> name;
    std::optional<TensorParameters> params;
    const bool read = ScanObject(in_, {"name", "parameters"}, [&](std::string_view key) {
      std::string_view text;
      if (key == "name") {
        if (!in_.String(&text) || text.empty()) return false;
        name = text;
        return true;
      }
      if (key == "parameters") {
        return in_.Peek('{') && ScanTensorParameters(in_, true, &params.emplace());
      }
      return false;  // CheckKeys refuses any other key
    });
    if (!read || !name) return false;
    output->name = std::string(*name);
    if (!params) return true;
    if (!ShmPlaceOf(*params, &output->shm)) return false;
    if (params->classification) {
      const JsonNumber& count = *params->classification;
      if (count.kind != JsonNumber::kUnsigned || count.unsigned_value < 1 ||
          count.unsigned_value > static_cast<uint64_t>(kMaxClassCount) || output->shm.used()) {
        return false;
      }
      output->class_count = static_cast<int64_t>(count.unsigned_value);
    }
    if (params->binary_data) output->binary = *params->binary_data;
    return true;
  }

  const std::shared_ptr<const std::string>& body_;
  JsonCursor in_;
  size_t binary_offset_;
  std::optional<std::string> id_;
  std::optional<bool> binary_outputs_;
  std::optional<int64_t> timeout_ms_;
  std::optional<int> priority_;
  std::optional<double> client_weight_;
  std::vector<V2Tensor> inputs_;
  std::vector<V2RequestedOutput> outputs_;
};

}  // namespace

bool ParseV2InferRequestFast(const std::shared_ptr<const std::string>& body, size_t json_bytes,
                             V2InferRequest* out) {
  if (json_bytes > body->size()) return false;
  RequestScanner scanner(body, json_bytes);
  if (!scanner.Scan()) return false;
  scanner.MoveTo(out);
  return true;
}

}  // namespace torchfarm
