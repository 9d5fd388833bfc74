// The admin socket's protocol: one JSON object in ({"cmd": NAME, ...}), one JSON object out, for
// `torchfarm stats|top|ctl`, probes and scripts (docs/operations.md). REQ and DEALER clients both
// work. Commands are registered by name with the fields they need; the service checks the request
// against them, so a malformed command is answered with what was expected and what was received
// and never reaches its handler.
//
// Owns: the command table. Reads and answers the admin socket it is handed. Runs on the
// supervisor's loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

namespace torchfarm {

// The two answers every admin command gives: {"ok": true, "message": …} and
// {"ok": false, "error": …} (docs/operations.md, "Admin socket").
nlohmann::json AdminOk(const std::string& message);
nlohmann::json AdminError(const std::string& message);

class AdminService {
 public:
  using Handler = std::function<nlohmann::json(const nlohmann::json& request)>;
  // A field a command requires: its name and whether it must be a string, else an integer in
  // [min, max] (common/number_parse.h: never wrapped or truncated; handlers may read it as int).
  struct Field {
    std::string name;
    bool is_string = false;
    int64_t min = 0;
    int64_t max = INT32_MAX;
  };

  void Register(std::string name, std::vector<Field> fields, Handler handler);
  // Answers every request waiting on `socket` (at most a bounded number per call).
  void HandleRequests(zmq::socket_t& socket);
  // One request to its reply: the handler's, or {"ok": false, "error": ...}.
  nlohmann::json Run(const nlohmann::json& request) const;

 private:
  struct Command {
    std::string name;
    std::vector<Field> fields;
    Handler handler;
  };
  std::string Usage() const;

  std::vector<Command> commands_;
};

}  // namespace torchfarm
