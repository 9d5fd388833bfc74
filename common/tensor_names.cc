#include "common/tensor_names.h"

#include <algorithm>

#include "common/protocol.h"

namespace torchfarm {

bool TensorNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == ':' || c == '-';
}

bool ValidTensorName(std::string_view name) {
  return !name.empty() && name.size() <= kMaxTensorNameBytes &&
         std::all_of(name.begin(), name.end(), TensorNameChar);
}

std::string DefaultInputName(size_t index) { return "INPUT__" + std::to_string(index); }
std::string DefaultOutputName(size_t index) { return "OUTPUT__" + std::to_string(index); }

Status TensorNameFromJson(const nlohmann::json& entry, const std::string& where, std::string* out,
                          bool* present) {
  *present = false;
  if (!entry.is_object()) return Status::Ok();
  auto it = entry.find("name");
  if (it == entry.end()) return Status::Ok();
  if (!it->is_string() || !ValidTensorName(it->get_ref<const std::string&>())) {
    // dump() with replacement: a received name may hold invalid UTF-8.
    return InvalidArgument(where + ".name: expected 1.." + std::to_string(kMaxTensorNameBytes) +
                           " of the characters A-Z a-z 0-9 _ . : -, got " +
                           it->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  *out = it->get<std::string>();
  *present = true;
  return Status::Ok();
}

Status CheckUniqueTensorNames(const std::vector<std::string>& names, const std::string& where) {
  for (size_t i = 0; i < names.size(); ++i) {
    for (size_t k = 0; k < i; ++k) {
      if (names[k] == names[i]) {
        return InvalidArgument(where + "[" + std::to_string(i) + "].name: \"" + names[i] +
                               "\" is already the name of " + where + "[" + std::to_string(k) +
                               "]; names must be unique");
      }
    }
  }
  return Status::Ok();
}

Status NamedTensorListFromJson(const nlohmann::json& list, const std::string& where,
                               size_t max_count, bool outputs, std::vector<TensorSpec>* specs,
                               std::vector<std::string>* names) {
  const char* noun = outputs ? "outputs" : "inputs";
  if (!list.is_array() || list.empty()) {
    return InvalidArgument(where +
                           ": expected a non-empty array of {\"name\", \"dtype\", "
                           "\"shape\"}, got " +
                           std::string(list.type_name()) + " " +
                           list.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  if (list.size() > max_count) {
    return InvalidArgument(where + ": " + std::to_string(list.size()) + " " + noun + ", at most " +
                           std::to_string(max_count));
  }
  specs->clear();
  names->clear();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string entry_where = where + "[" + std::to_string(i) + "]";
    TensorSpec spec;
    if (Status s = TensorSpecFromJson(list[i], entry_where, true, &spec); !s.ok()) return s;
    std::string name;
    bool named = false;
    if (Status s = TensorNameFromJson(list[i], entry_where, &name, &named); !s.ok()) return s;
    specs->push_back(std::move(spec));
    names->push_back(named ? name : outputs ? DefaultOutputName(i) : DefaultInputName(i));
  }
  return CheckUniqueTensorNames(*names, where);
}

std::string JoinTensorNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace torchfarm
