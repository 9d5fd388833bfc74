#include "supervisor/admin/log_settings.h"

#include <string>

namespace torchfarm {

using nlohmann::json;

namespace {

json LogErrorAnswer(const Status& status) {
  return {{"status", "error"},
          {"code", std::string(StatusCodeName(status.code()))},
          {"message", status.message()}};
}

std::string Shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 100 ? text.substr(0, 100) + "..." : text;
}

}  // namespace

json LogSettingsJson(LogLevel level) {
  return {{"log_file", ""},
          {"log_info", level <= LogLevel::kInfo},
          {"log_warning", level <= LogLevel::kWarn},
          {"log_error", true},
          {"log_verbose_level", level == LogLevel::kDebug ? 1 : 0},
          {"log_format", "default"}};
}

Status ApplyLogSettings(const json& settings, LogLevel current, LogLevel* out) {
  if (!settings.is_object()) {
    return InvalidArgument("log settings: expected a JSON object, got " + Shown(settings));
  }
  json now = LogSettingsJson(current);
  for (const auto& [key, value] : settings.items()) {
    const std::string where = "log settings: " + key.substr(0, 100);
    if (key == "log_info" || key == "log_warning" || key == "log_error") {
      if (!value.is_boolean())
        return InvalidArgument(where + ": expected true or false, got " + Shown(value));
      if (key == "log_error" && !value.get<bool>()) {
        return InvalidArgument(where + ": the farm always logs errors; expected true");
      }
    } else if (key == "log_verbose_level") {
      if (!value.is_number_unsigned() || value.get<uint64_t>() > 0xffffffffu) {
        return InvalidArgument(where + ": expected an integer 0..4294967295, got " + Shown(value));
      }
    } else if (key == "log_file") {
      if (value != "")
        return InvalidArgument(where + ": the farm logs to stderr; expected \"\", got " +
                               Shown(value));
    } else if (key == "log_format") {
      if (value != "default") {
        return InvalidArgument(
            where + ": expected \"default\" (the farm writes logfmt lines), got " + Shown(value));
      }
    } else {
      return InvalidArgument(where +
                             ": unknown setting; expected log_file, log_info, log_warning, "
                             "log_error, log_verbose_level or log_format");
    }
    now[key] = value;
  }
  if (now["log_verbose_level"].get<uint64_t>() > 0) {
    *out = LogLevel::kDebug;
  } else if (now["log_info"].get<bool>()) {
    *out = LogLevel::kInfo;
  } else if (now["log_warning"].get<bool>()) {
    *out = LogLevel::kWarn;
  } else {
    *out = LogLevel::kError;
  }
  return Status::Ok();
}

json LogSettingsAnswer(const json& settings, bool allowed) {
  if (!settings.is_object() || !settings.empty()) {
    if (!allowed) {
      return LogErrorAnswer(Unavailable(
          "changing the log settings is off on this farm: set \"frontend\": {\"log_control\": "
          "true} in its config to allow it over HTTP and gRPC"));
    }
    LogLevel level = GetLogLevel();
    if (Status s = ApplyLogSettings(settings, level, &level); !s.ok()) return LogErrorAnswer(s);
    if (level != GetLogLevel()) {
      TF_LOG(kWarn) << "log level changed over the v2 front end"
                    << Kv("level", static_cast<int>(level));
      SetLogLevel(level);
    }
  }
  return {{"logging", LogSettingsJson(GetLogLevel())}};
}

}  // namespace torchfarm
