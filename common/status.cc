#include "common/status.h"

#include <array>

namespace torchfarm {
namespace {
constexpr std::array<std::pair<StatusCode, std::string_view>, 7> kNames = {{
    {StatusCode::kOk, "OK"},
    {StatusCode::kInvalidArgument, "INVALID_ARGUMENT"},
    {StatusCode::kNotFound, "NOT_FOUND"},
    {StatusCode::kResourceExhausted, "RESOURCE_EXHAUSTED"},
    {StatusCode::kDeadlineExceeded, "DEADLINE_EXCEEDED"},
    {StatusCode::kUnavailable, "UNAVAILABLE"},
    {StatusCode::kInternal, "INTERNAL"},
}};
}  // namespace

std::string_view StatusCodeName(StatusCode code) {
  for (const auto& [c, name] : kNames) {
    if (c == code) return name;
  }
  return "INTERNAL";
}

std::optional<StatusCode> ParseStatusCode(std::string_view name) {
  for (const auto& [c, n] : kNames) {
    if (n == name) return c;
  }
  return std::nullopt;
}

const std::string& Status::EmptyMessage() {
  static const std::string* const empty = new std::string();  // never destroyed: safe at exit
  return *empty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message();
}

}  // namespace torchfarm
