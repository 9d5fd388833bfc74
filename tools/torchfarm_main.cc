// `torchfarm`: the user's command-line tool for a running farm. No LibTorch.
//
// Owns: the top-level CLI11 app and the list of subcommands (one file pair each, see
// tools/command.h). To add one: write <name>_command.h/.cc, add it to tools/CMakeLists.txt and
// one line to MakeCommands below.
#include <memory>
#include <vector>

#include "common/log.h"
#include "tools/bench_command.h"
#include "tools/command.h"
#include "tools/ctl_command.h"
#include "tools/infer_command.h"
#include "tools/keygen_command.h"
#include "tools/stats_command.h"
#include "tools/top_command.h"

namespace {

std::vector<std::unique_ptr<torchfarm::Command>> MakeCommands(CLI::App* app) {
  std::vector<std::unique_ptr<torchfarm::Command>> commands;
  commands.push_back(std::make_unique<torchfarm::InferCommand>(app));
  commands.push_back(std::make_unique<torchfarm::BenchCommand>(app));
  commands.push_back(std::make_unique<torchfarm::StatsCommand>(app));
  commands.push_back(std::make_unique<torchfarm::TopCommand>(app));
  commands.push_back(std::make_unique<torchfarm::CtlCommand>(app));
  commands.push_back(std::make_unique<torchfarm::KeygenCommand>(app));
  return commands;
}

}  // namespace

int main(int argc, char** argv) {
  // The CLI reports failures itself on stderr; library warnings would only repeat them.
  torchfarm::SetLogLevel(torchfarm::LogLevel::kError);
  CLI::App app{"torchfarm: talk to a torchfarm inference farm"};
  app.require_subcommand(1);
  auto commands = MakeCommands(&app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other parse failure is a usage error.
    return app.exit(e) == 0 ? torchfarm::kExitOk : torchfarm::kExitUsage;
  }
  for (auto& command : commands) {
    if (command->app()->parsed()) return command->Run();
  }
  return torchfarm::kExitUsage;
}
