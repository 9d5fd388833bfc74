// `torchfarm keygen`: writes a CURVE key pair for the job socket (docs/security.md).
//
// Owns: the flags of the subcommand. Runs in the CLI process only, on its main thread.
//
//   torchfarm keygen --out NAME [--force]
//
// Writes NAME.key_secret (mode 0600; never replaces an existing one unless --force) and NAME.key
// (the public key, to hand to the other side: the server's to every client, a client's into the
// supervisor's authorized_clients_dir). Prints the public key on stdout.
#pragma once

#include <string>

#include "tools/command.h"

namespace torchfarm {

class KeygenCommand : public Command {
 public:
  explicit KeygenCommand(CLI::App* parent);

  CLI::App* app() const override { return app_; }
  int Run() override;

 private:
  CLI::App* app_;
  std::string out_;
  bool force_ = false;
};

}  // namespace torchfarm
