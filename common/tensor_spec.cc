#include "common/tensor_spec.h"

namespace torchfarm {

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string SpecToString(const TensorSpec& spec) {
  return std::string(DTypeName(spec.dtype)) + " " + ShapeToString(spec.shape);
}

Status CheckAgainstDeclared(const TensorSpec& declared, const TensorSpec& got, size_t input_index) {
  bool ok = declared.dtype == got.dtype && declared.shape.size() == got.shape.size();
  for (size_t i = 0; ok && i < declared.shape.size(); ++i) {
    if (declared.shape[i] != -1 && declared.shape[i] != got.shape[i]) ok = false;
  }
  if (ok) return Status::Ok();
  std::string what = declared.dtype != got.dtype                   ? "dtype"
                     : declared.shape.size() != got.shape.size() ? "rank"
                                                                 : "shape";
  return InvalidArgument("input " + std::to_string(input_index) + ": " + what +
                         " mismatch: expected " + SpecToString(declared) + ", got " +
                         SpecToString(got));
}

int64_t Rows(const TensorSpec& spec) { return spec.shape.empty() ? 1 : spec.shape[0]; }

}  // namespace torchfarm
