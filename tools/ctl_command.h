// `torchfarm ctl`: operator actions on a running farm through its admin socket.
//
// Owns: the flags of the subcommand and its actions, and the mapping of outcomes to exit codes
// (tools/command.h). Runs in the CLI process only, on its main thread.
//
//   torchfarm ctl [--admin EP] [--timeout-ms N] [--json] health
//   torchfarm ctl [--admin EP] drain | reload | restart WORKER | scale MODEL COUNT
//   torchfarm ctl [--admin EP] [--json] models
//   torchfarm ctl [--admin EP] [--timeout-ms N] load NAME [--config-json JSON] [--no-wait]
//   torchfarm ctl [--admin EP] [--timeout-ms N] unload NAME [--no-wait]
//
// health prints liveness and readiness per model and exits 0 when the farm is ready, 1 when it
// is not, 3 when nothing answers: a readiness probe as it stands. The other actions print the
// supervisor's message and exit 0 when it says ok, 1 when it refuses.
//
// reload then waits (unless --no-wait) for the rolling replacements it started to end, polling
// stats, and prints each outcome; it exits 1 when one failed (with the reason) or was still rolling
// when the wait ran out: --timeout-ms when given, else kDefaultRolloutWaitMs.
//
// models prints every model with its lifecycle state (loading, available, unavailable,
// unloading, rolling), ready/total workers, queue depth and last rollout (ctl_models.cc). load
// waits (unless --no-wait, same bound as reload) until the model is available, and exits 1 with
// the workers' failure reason when it becomes unavailable instead; unload waits until the model's
// workers are gone.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tools/admin_client.h"
#include "tools/command.h"

namespace torchfarm {

class CtlCommand : public Command {
 public:
  explicit CtlCommand(CLI::App* parent);

  CLI::App* app() const override { return app_; }
  int Run() override;

 private:
  int RunHealth(const nlohmann::json& reply) const;
  int RunAction(const nlohmann::json& reply) const;
  // Polls stats until every rollout named in the reload reply is done or failed.
  int WaitForRollouts(AdminClient& client, const nlohmann::json& rollouts) const;
  // `ctl models`, and the waits of load and unload (ctl_models.cc).
  int RunModels(const nlohmann::json& reply) const;
  int WaitForLoad(AdminClient& client) const;
  int WaitForUnload(AdminClient& client) const;
  int WaitBoundMs() const;
  // The request of the parsed action.
  nlohmann::json Request() const;

  CLI::App* app_;
  CLI::App* health_;
  CLI::App* drain_;
  CLI::App* reload_;
  CLI::App* restart_;
  CLI::App* scale_;
  CLI::App* models_;
  CLI::App* load_;
  CLI::App* unload_;
  std::string config_json_;  // load --config-json
  std::string admin_ = kDefaultAdminEndpoint;
  int timeout_ms_ = kDefaultAdminTimeoutMs;
  bool json_ = false;
  bool no_wait_ = false;
  static constexpr int kDefaultRolloutWaitMs = 300'000;
  int worker_ = 0;
  std::string model_;
  int count_ = 0;
};

}  // namespace torchfarm
