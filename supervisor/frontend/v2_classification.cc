#include "supervisor/frontend/v2_classification.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <string_view>
#include <vector>

#include "common/bytes_items.h"
#include "common/dtype.h"
#include "supervisor/frontend/v2_json_data.h"

namespace torchfarm {

namespace {

template <typename T>
T LoadAt(const char* data, size_t i) {
  T value;
  std::memcpy(&value, data + i * sizeof(T), sizeof(T));
  return value;
}

// Element i as a double (for ordering) and its text ("%f" for floating types).
bool ClassValue(DType dtype, const char* data, size_t i, double* value, bool* floating) {
  *floating = false;
  switch (dtype) {
    case DType::kFloat32:
      *value = LoadAt<float>(data, i);
      *floating = true;
      return true;
    case DType::kFloat64:
      *value = LoadAt<double>(data, i);
      *floating = true;
      return true;
    case DType::kFloat16:
      *value = HalfToFloat(LoadAt<uint16_t>(data, i));
      *floating = true;
      return true;
    case DType::kBFloat16:
      *value = BFloat16ToFloat(LoadAt<uint16_t>(data, i));
      *floating = true;
      return true;
    case DType::kInt64:
      *value = static_cast<double>(LoadAt<int64_t>(data, i));
      return true;
    case DType::kInt32:
      *value = LoadAt<int32_t>(data, i);
      return true;
    case DType::kInt16:
      *value = LoadAt<int16_t>(data, i);
      return true;
    case DType::kInt8:
      *value = LoadAt<int8_t>(data, i);
      return true;
    case DType::kUInt8:
      *value = LoadAt<uint8_t>(data, i);
      return true;
    case DType::kBool:
      *value = LoadAt<uint8_t>(data, i) != 0;
      return true;
    default:
      return false;
  }
}

std::string ClassText(DType dtype, const char* data, size_t i, size_t index) {
  double value = 0;
  bool floating = false;
  ClassValue(dtype, data, i, &value, &floating);
  char text[400];
  if (floating) {
    std::snprintf(text, sizeof(text), "%f:%zu", value, index);
  } else if (dtype == DType::kInt64) {
    std::snprintf(text, sizeof(text), "%lld:%zu", static_cast<long long>(LoadAt<int64_t>(data, i)),
                  index);
  } else {
    std::snprintf(text, sizeof(text), "%.0f:%zu", value, index);
  }
  return text;
}

}  // namespace

Status ClassifyOutput(int64_t class_count, V2Tensor* tensor) {
  const std::string where =
      "outputs '" + tensor->name.substr(0, 128) + "'.parameters.classification";
  if (class_count < 1 || class_count > kMaxClassCount) {
    return InvalidArgument(where + ": expected a class count in 1.." +
                           std::to_string(kMaxClassCount) + ", got " + std::to_string(class_count));
  }
  DType dtype = DType::kFloat32;
  if (!DTypeFromV2(tensor->datatype, where, &dtype).ok() || tensor->shape.empty()) {
    return InvalidArgument(where + ": expected a numeric output of rank 1 or more, got " +
                           tensor->datatype + " of rank " + std::to_string(tensor->shape.size()));
  }
  const size_t rows = tensor->shape.size() >= 2 ? static_cast<size_t>(tensor->shape[0]) : 1;
  const size_t total = tensor->data.size() / DTypeSize(dtype);
  const size_t classes = rows == 0 ? 0 : total / rows;
  const size_t k = std::min(static_cast<size_t>(class_count), classes);
  const char* data = static_cast<const char*>(tensor->data.data());
  std::string out;
  std::vector<size_t> order(classes);
  std::vector<double> values(classes);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < classes; ++c) {
      bool floating = false;
      ClassValue(dtype, data, r * classes + c, &values[c], &floating);
      // NaN ranks last, so the order is a strict weak one (partial_sort needs it).
      if (std::isnan(values[c])) values[c] = -std::numeric_limits<double>::infinity();
    }
    std::iota(order.begin(), order.end(), size_t{0});
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [&](size_t a, size_t b) {
                        return values[a] > values[b] || (values[a] == values[b] && a < b);
                      });
    for (size_t j = 0; j < k; ++j) {
      AppendBytesItem(ClassText(dtype, data, r * classes + order[j], order[j]), &out);
    }
  }
  tensor->datatype = "BYTES";
  tensor->shape = tensor->shape.size() >= 2
                      ? std::vector<int64_t>{static_cast<int64_t>(rows), static_cast<int64_t>(k)}
                      : std::vector<int64_t>{static_cast<int64_t>(k)};
  tensor->data = zmq::message_t(out.data(), out.size());
  return Status::Ok();
}

nlohmann::json BytesDataJson(const V2Tensor& tensor) {
  uint64_t items = 1;
  for (int64_t d : tensor.shape) items *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  std::vector<std::string_view> split;
  const std::string_view buffer(static_cast<const char*>(tensor.data.data()), tensor.data.size());
  nlohmann::json out = nlohmann::json::array();
  if (!SplitBytesItems(buffer, items, kMaxBytesItem, "BYTES output", &split).ok()) return out;
  for (std::string_view item : split) out.push_back(std::string(item));
  return out;
}

}  // namespace torchfarm
