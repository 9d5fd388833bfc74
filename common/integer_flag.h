// Integer command-line flags (CLI11) read as common/number_parse.h reads every number from
// outside: decimal digits within an explicit range, checked on the text before CLI11 converts it,
// so 2^32 never wraps into an int and "-1" never means "unset". A refusal reads
//   "--drain-timeout-ms: expected an integer in 0..86400000, got '86400001'".
// Header-only, for the binaries that link CLI11 (torchfarm-supervisor, torchfarm); not installed.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "common/number_parse.h"

namespace torchfarm {

inline CLI::Validator IntegerIn(int64_t min, int64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        int64_t value = 0;
        if (IntegerFromText(text, "", min, max, &value).ok()) return {};
        // CLI11 puts the option's name in front.
        return "expected an integer in " + RangeText(min, max) + ", got '" + text + "'";
      },
      "INT in " + RangeText(min, max));
}

}  // namespace torchfarm
