// Helpers of the security tests: raw sockets, the supervisor's RSS, the log of a farm.
#pragma once

#include <sys/types.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "farm_fixture.h"

namespace torchfarm::testing {

// VmRSS of `pid` in bytes, 0 when gone.
inline int64_t RssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline nlohmann::json IdentityModel(int workers = 1) {
  return {{"name", "identity"},
          {"path", ModelDir() + "/identity.pt"},
          {"inputs", nlohmann::json::array({{{"dtype", "int32"}, {"shape", {-1, 3}}}})},
          {"max_batch_size", 8},
          {"slot_bytes", 65536},
          {"instances", nlohmann::json::array({{{"count", workers}}})}};
}

}  // namespace torchfarm::testing
