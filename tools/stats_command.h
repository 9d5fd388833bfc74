// `torchfarm stats`: the farm's counters as tables (or the raw JSON), once or every N seconds.
//
// Owns: the flags of the subcommand and the mapping of outcomes to exit codes (tools/command.h).
// Runs in the CLI process only, on its main thread.
//
//   torchfarm stats [--admin EP] [--json] [--watch SECONDS] [--timeout-ms N]
//
// With --watch it prints a timestamped snapshot every SECONDS until interrupted; a snapshot the
// supervisor does not answer is reported on stderr and the watch goes on.
#pragma once

#include <string>

#include "tools/admin_client.h"
#include "tools/command.h"

namespace torchfarm {

class StatsCommand : public Command {
 public:
  explicit StatsCommand(CLI::App* parent);

  CLI::App* app() const override { return app_; }
  int Run() override;

 private:
  // Fetches and prints one snapshot; returns its exit code.
  int PrintOnce(AdminClient* client) const;

  CLI::App* app_;
  std::string admin_ = kDefaultAdminEndpoint;
  bool json_ = false;
  double watch_seconds_ = 0;
  int timeout_ms_ = kDefaultAdminTimeoutMs;
};

}  // namespace torchfarm
