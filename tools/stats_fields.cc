#include "tools/stats_fields.h"

#include <cmath>
#include <cstdio>

namespace torchfarm {

using nlohmann::json;

namespace {

std::string Printf(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

std::string Printf2(const char* format, long long a, long long b) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, a, b);
  return buffer;
}

}  // namespace

const json* FindField(const json& object, std::initializer_list<std::string_view> path) {
  const json* node = &object;
  for (std::string_view key : path) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node->is_null() ? nullptr : node;
}

std::optional<double> NumberField(const json& object,
                                  std::initializer_list<std::string_view> path) {
  const json* node = FindField(object, path);
  if (node == nullptr) return std::nullopt;
  if (node->is_number()) return node->get<double>();
  if (node->is_boolean()) return node->get<bool>() ? 1.0 : 0.0;
  return std::nullopt;
}

std::string TextField(const json& object, std::initializer_list<std::string_view> path) {
  const json* node = FindField(object, path);
  if (node == nullptr || node->is_structured()) return kMissing;
  if (node->is_string()) {
    const auto& text = node->get_ref<const std::string&>();
    return text.empty() ? kMissing : text;
  }
  return node->dump();
}

const json& ArrayField(const json& object, std::string_view key) {
  static const json kEmpty = json::array();
  const json* node = FindField(object, {key});
  return node != nullptr && node->is_array() ? *node : kEmpty;
}

std::optional<double> LatencyField(const json& model, std::string_view stage,
                                   std::string_view percentile) {
  auto count = NumberField(model, {"latency_us", stage, "count"});
  if (count && *count <= 0) return std::nullopt;
  return NumberField(model, {"latency_us", stage, percentile});
}

bool FlagField(const json& object, std::initializer_list<std::string_view> path) {
  const json* node = FindField(object, path);
  return node != nullptr && node->is_boolean() && node->get<bool>();
}

std::string FormatCount(std::optional<double> value) {
  if (!value || !std::isfinite(*value)) return kMissing;
  return Printf("%.0f", *value);
}

std::string FormatCompactCount(std::optional<double> value) {
  if (!value || !std::isfinite(*value)) return kMissing;
  double v = *value;
  double magnitude = std::fabs(v);
  if (magnitude < 10'000) return Printf("%.0f", v);
  if (magnitude < 999'950) return Printf("%.1fk", v / 1e3);
  if (magnitude < 999'995'000) return Printf("%.2fM", v / 1e6);
  return Printf("%.2fG", v / 1e9);
}

std::string FormatDecimal(std::optional<double> value, int decimals) {
  if (!value || !std::isfinite(*value)) return kMissing;
  char format[16];
  std::snprintf(format, sizeof format, "%%.%df", decimals);
  return Printf(format, *value);
}

std::string FormatMicros(std::optional<double> micros) {
  if (!micros || !std::isfinite(*micros)) return kMissing;
  double us = *micros;
  if (us < 1000) return Printf("%.0fus", us);
  if (us < 9'995) return Printf("%.2fms", us / 1e3);
  if (us < 999'950) return Printf("%.1fms", us / 1e3);
  return Printf("%.2fs", us / 1e6);
}

std::string FormatSeconds(std::optional<double> seconds) {
  if (!seconds || !std::isfinite(*seconds) || *seconds < 0) return kMissing;
  auto s = static_cast<long long>(*seconds);
  if (s < 60) return Printf("%.0fs", std::floor(*seconds));
  if (s < 3600) return Printf2("%lldm%02llds", s / 60, s % 60);
  if (s < 86400) return Printf2("%lldh%02lldm", s / 3600, (s % 3600) / 60);
  return Printf2("%lldd%02lldh", s / 86400, (s % 86400) / 3600);
}

std::string FormatBytes(std::optional<double> bytes) {
  if (!bytes || !std::isfinite(*bytes) || *bytes < 0) return kMissing;
  double b = *bytes;
  if (b < 1024) return Printf("%.0fB", b);
  if (b < 1024.0 * 1024) return Printf("%.1fK", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return Printf("%.1fM", b / (1024.0 * 1024));
  return Printf("%.2fG", b / (1024.0 * 1024 * 1024));
}

std::string WorkerStateText(const nlohmann::json& worker) {
  const std::string state = TextField(worker, {"state"});
  return TextField(worker, {"role"}) == "spare" ? "spare " + state : state;
}

std::string ModelLabel(const nlohmann::json& object, std::string_view name_key) {
  const std::string name = TextField(object, {name_key});
  const std::string version = TextField(object, {"version"});
  return version == kMissing || version == "1" ? name : name + ":" + version;
}

}  // namespace torchfarm
