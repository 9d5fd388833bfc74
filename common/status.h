// Status codes and the Status value that expected failures travel in.
//
// Owns: the closed set of error codes of the wire protocol (docs/protocol.md) and their names.
// Used by every process; a failure a user can cause is returned as a Status, never thrown across a
// process boundary.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace torchfarm {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kResourceExhausted = 3,
  kDeadlineExceeded = 4,
  kUnavailable = 5,
  kInternal = 6,
};

// "OK", "INVALID_ARGUMENT", ... exactly as they appear in the wire protocol.
std::string_view StatusCodeName(StatusCode code);
std::optional<StatusCode> ParseStatusCode(std::string_view name);

// OK carries nothing: the message lives behind a pointer that stays null for OK, so passing and
// assigning an OK Status, as every request's checks do several times over, moves a pointer, not a
// string (issue 36: ~25 instructions and a call per assignment before).
class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code),
        message_(message.empty() ? nullptr : std::make_unique<std::string>(std::move(message))) {}
  Status(const Status& other) : code_(other.code_), message_(CopyOf(other.message_)) {}
  Status& operator=(const Status& other) {
    if (this != &other) {
      std::unique_ptr<std::string> message = CopyOf(other.message_);  // may throw: first
      code_ = other.code_;
      message_ = std::move(message);
    }
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_ ? *message_ : EmptyMessage(); }
  // "INVALID_ARGUMENT: message"
  std::string ToString() const;

 private:
  static std::unique_ptr<std::string> CopyOf(const std::unique_ptr<std::string>& message) {
    return message ? std::make_unique<std::string>(*message) : nullptr;
  }
  static const std::string& EmptyMessage();

  StatusCode code_ = StatusCode::kOk;
  std::unique_ptr<std::string> message_;  // null: no message (always, for OK made by Ok())
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

}  // namespace torchfarm
