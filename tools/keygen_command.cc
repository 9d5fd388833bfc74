#include "tools/keygen_command.h"

#include <unistd.h>

#include <iostream>

#include "common/curve_keys.h"

namespace torchfarm {

KeygenCommand::KeygenCommand(CLI::App* parent) {
  app_ = parent->add_subcommand("keygen",
                                "Write a CURVE key pair: NAME.key (public) and NAME.key_secret "
                                "(mode 0600)");
  app_->add_option("--out", out_, "Path and base name of the two files")->required();
  app_->add_flag("--force", force_, "Replace an existing NAME.key_secret");
}

int KeygenCommand::Run() {
  CurveKeyPair pair;
  if (Status s = GenerateCurveKeyPair(&pair); !s.ok()) {
    std::cerr << "torchfarm keygen: " << s.message() << "\n";
    return kExitTransport;
  }
  if (force_) ::unlink((out_ + kSecretKeySuffix).c_str());
  if (Status s = WriteCurveKeyPair(out_, pair); !s.ok()) {
    std::cerr << "torchfarm keygen: " << s.message() << "\n";
    return kExitUsage;
  }
  std::cerr << "wrote " << out_ << kSecretKeySuffix << " (secret, mode 0600) and " << out_
            << kPublicKeySuffix << " (public)\n";
  std::cout << pair.public_key << "\n";
  return kExitOk;
}

}  // namespace torchfarm
