// One-line-per-event logging to stderr in logfmt (ts=… level=… msg="…" key=value …), the format
// journald and log shippers ingest without a parser.
//
// Owns: the process-wide level and the line format. Thread-safe: each line is one write(2).
// Usage: TF_LOG(kInfo) << "worker ready" << Kv("worker", 3) << Kv("pid", pid);
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace torchfarm {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Accepts debug|info|warn|warning|error; returns false for anything else.
bool ParseLogLevel(std::string_view text, LogLevel* out);
// Static fields appended to every line of this process (e.g. "worker=3 pid=1234").
void SetLogContext(std::string context);

struct Kv {
  template <typename T>
  Kv(std::string_view key, const T& value) {
    std::ostringstream s;
    s << value;
    text = std::string(key) + "=" + Quote(s.str());
  }
  static std::string Quote(const std::string& value);
  std::string text;
};

class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;

  LogLine& operator<<(const Kv& kv) {
    fields_ << ' ' << kv.text;
    return *this;
  }
  template <typename T>
  LogLine& operator<<(const T& message_part) {
    message_ << message_part;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream message_;
  std::ostringstream fields_;
};

}  // namespace torchfarm

#define TF_LOG(level)                                                     \
  if (::torchfarm::LogLevel::level < ::torchfarm::GetLogLevel()) {        \
  } else                                                                  \
    ::torchfarm::LogLine(::torchfarm::LogLevel::level)

// For a level chosen at run time: TF_LOG_AT(ok ? LogLevel::kInfo : LogLevel::kWarn) << …
#define TF_LOG_AT(level_value)                                            \
  if ((level_value) < ::torchfarm::GetLogLevel()) {                       \
  } else                                                                  \
    ::torchfarm::LogLine(level_value)
