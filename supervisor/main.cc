// torchfarm-supervisor: loads the farm config, starts the workers and serves until stopped.
#include <CLI/CLI.hpp>
#include <iostream>

#include "common/config.h"
#include "common/integer_flag.h"
#include "common/log.h"
#include "supervisor/security/descriptor_limit.h"
#include "supervisor/supervisor.h"

int main(int argc, char** argv) {
  CLI::App app{"torchfarm-supervisor: serves TorchScript models through a farm of worker processes"};
  std::string config_path;
  std::string log_level = "info";
  int64_t drain_timeout_ms = 0;
  app.add_option("--config", config_path, "farm config (JSON)")->required();
  app.add_option("--log-level", log_level, "debug, info, warn or error");
  auto* drain_flag =
      app.add_option("--drain-timeout-ms", drain_timeout_ms,
                     "on SIGTERM/SIGINT, how long queued and running requests may take to finish "
                     "(overrides drain_timeout_ms of the config)")
          ->check(torchfarm::IntegerIn(0, torchfarm::kMaxDrainTimeoutMs));
  CLI11_PARSE(app, argc, argv);

  torchfarm::LogLevel level;
  if (!torchfarm::ParseLogLevel(log_level, &level)) {
    std::cerr << "--log-level: expected debug, info, warn or error, got '" << log_level << "'\n";
    return 2;
  }
  torchfarm::SetLogLevel(level);
  torchfarm::SetLogContext("component=supervisor pid=" + std::to_string(::getpid()));

  torchfarm::FarmConfig config;
  if (auto s = torchfarm::LoadConfigFile(config_path, &config); !s.ok()) {
    TF_LOG(kError) << "invalid config: " << s.message();
    return 2;
  }
  torchfarm::RaiseDescriptorLimit();
  auto options = torchfarm::SupervisorOptions::From(config, log_level);
  if (drain_flag->count() > 0) options.drain_timeout = torchfarm::Millis(drain_timeout_ms);
  torchfarm::Supervisor supervisor(std::move(config), options);
  if (auto s = supervisor.Start(); !s.ok()) {
    TF_LOG(kError) << "cannot start: " << s.message();
    return 1;
  }
  return supervisor.Run();
}
