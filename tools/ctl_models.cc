// `torchfarm ctl models`, and the waits of `ctl load` and `ctl unload`: poll the `models` admin
// command until the model is available (or failed) or gone. Part of CtlCommand (ctl_command.h);
// runs in the CLI process on its main thread.
#include <chrono>
#include <iostream>
#include <thread>

#include "tools/ctl_command.h"
#include "tools/stats_fields.h"
#include "tools/text_table.h"

namespace torchfarm {

using nlohmann::json;

namespace {

std::string RolloutText(const json& model) {
  const json* r = FindField(model, {"rollout"});
  if (r == nullptr || !r->is_object()) return kMissing;
  std::string text = "#" + TextField(*r, {"id"}) + " " + TextField(*r, {"state"}) + " " +
                     TextField(*r, {"replaced"}) + "/" + TextField(*r, {"total"});
  const std::string reason = r->value("reason", "");
  return reason.empty() ? text : text + ": " + reason;
}

// The entry of `name` in a models reply; nullptr when it lists none.
const json* FindModelEntry(const json& reply, const std::string& name) {
  const json* models = FindField(reply, {"models"});
  if (models == nullptr || !models->is_array()) return nullptr;
  for (const auto& m : *models) {
    if (m.value("name", "") == name) return &m;
  }
  return nullptr;
}

}  // namespace

int CtlCommand::WaitBoundMs() const {
  const bool timeout_given = app_->get_option("--timeout-ms")->count() > 0;
  return timeout_given ? timeout_ms_ : kDefaultRolloutWaitMs;
}

int CtlCommand::RunModels(const json& reply) const {
  if (std::string error = AdminReplyError(reply); !error.empty()) {
    std::cerr << "error: " << error << "\n";
    return kExitServerError;
  }
  if (json_) return kExitOk;
  TextTable table({{"MODEL"},
                   {"STATE"},
                   {"READY", TextTable::Align::kRight},
                   {"QUEUE", TextTable::Align::kRight},
                   {"LAST ROLLOUT"},
                   {"REASON"}});
  const json* models = FindField(reply, {"models"});
  for (const auto& m : models != nullptr && models->is_array() ? *models : json::array()) {
    table.AddRow({{TextField(m, {"name"})},
                  {TextField(m, {"state"})},
                  {TextField(m, {"ready_workers"}) + "/" + TextField(m, {"workers"})},
                  {TextField(m, {"queue_depth"})},
                  {RolloutText(m)},
                  {m.value("reason", "")}});
  }
  for (const auto& line : table.Render(false)) std::cout << line << "\n";
  return kExitOk;
}

int CtlCommand::WaitForLoad(AdminClient& client) const {
  using Steady = std::chrono::steady_clock;
  const auto deadline = Steady::now() + std::chrono::milliseconds(WaitBoundMs());
  std::string state = "loading";
  while (true) {
    json reply;
    if (client.Command("models", &reply).ok()) {
      const json* m = FindModelEntry(reply, model_);
      state = m == nullptr ? "gone" : m->value("state", "");
      if (state == "available" || state == "rolling") {
        if (!json_) std::cout << model_ << ": available\n";
        return kExitOk;
      }
      if (state == "failed") {
        std::cerr << "error: loading model '" << model_ << "' failed: " << m->value("reason", "")
                  << "\n";
        return kExitServerError;
      }
      if (state != "loading") {
        std::cerr << "error: model '" << model_ << "' is " << state << " after the load"
                  << (m != nullptr && !m->value("reason", "").empty()
                          ? ": " + m->value("reason", "")
                          : std::string())
                  << "\n";
        return kExitServerError;
      }
    }
    if (Steady::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::cerr << "error: model '" << model_ << "' still " << state << " after " << WaitBoundMs()
            << " ms (see torchfarm ctl models)\n";
  return kExitServerError;
}

int CtlCommand::WaitForUnload(AdminClient& client) const {
  using Steady = std::chrono::steady_clock;
  const auto deadline = Steady::now() + std::chrono::milliseconds(WaitBoundMs());
  while (true) {
    json reply;
    if (client.Command("models", &reply).ok()) {
      const json* m = FindModelEntry(reply, model_);
      // Gone, or served again by a later load: either way its old workers have stopped.
      if (m == nullptr || m->value("state", "") != "unloading") {
        if (!json_) std::cout << model_ << ": unloaded, its workers are gone\n";
        return kExitOk;
      }
    }
    if (Steady::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::cerr << "error: model '" << model_ << "' still unloading after " << WaitBoundMs()
            << " ms (see torchfarm ctl models)\n";
  return kExitServerError;
}

}  // namespace torchfarm
