// Triton's logging extension (docs/kserve-v2.md, "Logging"): GET/POST /v2/logging and gRPC
// LogSettings read and set the supervisor's log level (common/log.h) in Triton's terms.
//
// Owns: the mapping both ways. Settings: log_info, log_warning, log_error (bool), log_verbose_level
// (uint; > 0 is the farm's debug level), log_file ("" only: the farm logs to stderr) and
// log_format ("default" only: logfmt lines). The level becomes debug when log_verbose_level > 0,
// else info when log_info, else warn when log_warning, else error; errors are always logged.
// Changing it is refused, naming the key, unless frontend.log_control is true. Workers keep the
// level they started with. Loop thread (the front ends ask with a "meta" query).
#pragma once

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/status.h"

namespace torchfarm {

// The settings that describe `level`.
nlohmann::json LogSettingsJson(LogLevel level);
// `settings` (a JSON object of the keys above, any subset) applied to `current`; INVALID_ARGUMENT
// naming the key and what it expected.
Status ApplyLogSettings(const nlohmann::json& settings, LogLevel current, LogLevel* out);
// The loop's answer to {"logging": SETTINGS}: sets the level when SETTINGS is not empty and
// `allowed`, and answers {"logging": the settings now}, or the wire protocol's error reply.
nlohmann::json LogSettingsAnswer(const nlohmann::json& settings, bool allowed);

}  // namespace torchfarm
