// Helpers the config unit tests share: the smallest valid config, and the message of a config
// that must be refused.
#pragma once

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/config.h"

namespace torchfarm::testing {

// One model "m" (m.pt, float32 [-1, 4]), everything else at its default.
inline nlohmann::json MinimalConfig() {
  return nlohmann::json::parse(R"({
    "models": [{"name": "m", "path": "m.pt",
                "inputs": [{"dtype": "float32", "shape": [-1, 4]}]}]
  })");
}

// The message of ParseConfig's refusal of `j` (base folder "/base"); a failure when it is not
// an INVALID_ARGUMENT.
inline std::string ParseError(const nlohmann::json& j) {
  FarmConfig c;
  Status s = ParseConfig(j, "/base", &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << j.dump();
  return s.message();
}

}  // namespace torchfarm::testing
