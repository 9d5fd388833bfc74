// `torchfarm top`: a live full-screen view of the farm, refreshed every interval.
//
// Owns: the flags of the subcommand and the refresh loop. Runs in the CLI process only, on its
// main thread: one poll() waits for the next refresh, a key on stdin or a signal
// (tools/terminal.h).
//
//   torchfarm top [--admin EP] [--interval-ms 1000] [--iterations N] [--no-colour]
//
// On a terminal: the alternate screen, colours, lines cut to the terminal's width and height;
// `q` quits, Ctrl-C too, Ctrl-Z suspends with the terminal restored. Otherwise (a pipe, a file):
// one plain snapshot block per interval, no escapes. --iterations N stops after N refreshes.
#pragma once

#include <string>

#include "tools/admin_client.h"
#include "tools/command.h"

namespace torchfarm {

class TopCommand : public Command {
 public:
  explicit TopCommand(CLI::App* parent);

  CLI::App* app() const override { return app_; }
  int Run() override;

 private:
  CLI::App* app_;
  std::string admin_ = kDefaultAdminEndpoint;
  int interval_ms_ = 1000;
  int iterations_ = 0;  // 0: until quit
  int timeout_ms_ = kDefaultAdminTimeoutMs;
  bool no_colour_ = false;
};

}  // namespace torchfarm
