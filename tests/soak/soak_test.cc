// Seeded randomised soak test (issue 15), with the real binaries. Each round starts a fresh
// supervisor on a config drawn from the documented ranges (soak_config.h; everything else at its
// documented default, the restart policy and heartbeat_ms included), loads it from several
// pipelining client threads (soak_client.h) and injects faults (fault_injector.h): SIGKILLed and
// SIGSTOPped workers, clients that stop reading with replies owed, bursts.
//
// Invariants of every round, checked by value:
//   - the supervisor never dies, and SIGTERM at the end stops it with exit code 0;
//   - every request of a reading client gets exactly one reply (counted by request id);
//   - an ok reply holds the expected output (identity: the input; mlp: an in-process forward of
//     mlp.pt, which the AOTInductor mlp a round may serve instead must match too);
//   - an error reply carries UNAVAILABLE, INTERNAL or RESOURCE_EXHAUSTED, and those stay under
//     1% of the requests; DEADLINE_EXCEEDED only for a request with a deadline, never before it;
//   - within 10 s after the faults stop, every model has all its workers ready.
//
// Environment: TORCHFARM_SOAK_SEED reproduces a run (printed first); TORCHFARM_SOAK_SECONDS is
// the total time (default 60); TORCHFARM_SOAK_ROUND runs that round of the seed alone.
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "fault_injector.h"
#include "farm_fixture.h"
#include "round_ledger.h"
#include "soak_client.h"
#include "soak_config.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

constexpr int kReadyAfterFaultsMs = 10'000;
// How long replies still owed may take once the faults stop; only a broken farm waits it out.
constexpr int kDrainMs = 20'000;
// Error replies other than DEADLINE_EXCEEDED allowed, in percent of the requests sent.
constexpr int kMaxErrorPercent = 1;
// Start-up and the checks after the load, on top of a round's load_ms.
constexpr int kRoundOverheadMs = 3'000;
constexpr int kMinRoundMs = 8'000;

std::optional<uint64_t> EnvNumber(const char* name) {
  const char* text = std::getenv(name);
  if (!text || !*text) return std::nullopt;
  return std::strtoull(text, nullptr, 10);
}

// The AOTInductor mlp (tools/export_model.py, ctest fixture venv_models) in a build against
// .venv's torch; empty in a Debian build, whose rounds serve mlp.pt only.
std::string AotiMlpPackage() {
#ifdef TORCHFARM_SOAK_AOTI_MLP
  return TORCHFARM_SOAK_AOTI_MLP;
#else
  return "";
#endif
}

uint64_t RunSeed() {
  if (auto seed = EnvNumber("TORCHFARM_SOAK_SEED")) return *seed;
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^
         static_cast<uint64_t>(Clock::now().time_since_epoch().count());
}

// One line per worker: id, model, state, restarts, why it last exited or failed.
std::string WorkersLine(const Farm& farm) {
  json stats = farm.Admin("stats", 2'000);
  if (!stats.is_object() || !stats.contains("workers")) return " no stats reply";
  std::string line;
  for (const auto& w : stats["workers"]) {
    line += "\n    worker";
    for (const char* key : {"id", "model", "state", "pid", "restarts", "last_exit", "failure_reason"}) {
      line += std::string(" ") + key + "=" + w.value(key, json()).dump();
    }
  }
  return line;
}

// After the faults: clients drain while the farm must get every worker ready again.
void CheckRecovery(Farm& farm, bool supervisor_alive, RoundControl& control, RoundLedger& ledger) {
  const auto faults_stopped = Clock::now();
  const auto drain_ms = supervisor_alive ? kDrainMs : 1'000;
  control.drain_deadline_ns = (faults_stopped + Ms(drain_ms)).time_since_epoch().count();
  control.stop_sending = true;
  if (!supervisor_alive) return;
  if (!farm.WaitReady(-1, kReadyAfterFaultsMs)) {
    ledger.Fail("not every worker ready " + std::to_string(kReadyAfterFaultsMs) +
                " ms after the faults stopped (" + farm.error() + "):" + WorkersLine(farm));
  }
}

void CheckStop(Farm& farm, RoundLedger& ledger) {
  if (!farm.Running()) {
    ledger.Fail("the supervisor died: " + farm.error());
    return;
  }
  const std::string workers = WorkersLine(farm);
  const int code = farm.Stop();
  if (code != 0) {
    ledger.Fail("SIGTERM ended the supervisor with " + std::to_string(code) +
                " (negative: signal; -1000: still running after 30 s), expected 0");
  }
  ledger.Note("workers at the end:" + workers);
}

void CheckErrorFraction(RoundLedger& ledger) {
  const int64_t sent = ledger.sent, errors = ledger.error_count();
  if (errors > 0 && errors * 100.0 > kMaxErrorPercent * static_cast<double>(sent)) {
    ledger.Fail("error replies other than DEADLINE_EXCEEDED: " + std::to_string(errors) + " of " +
                std::to_string(sent) + " requests, more than " +
                std::to_string(kMaxErrorPercent) + "%");
  }
}

// Loads `farm` and injects faults for config.load_ms, then checks the round's invariants.
void Exercise(Farm& farm, const RoundConfig& config, const MlpReference& mlp, RoundLedger& ledger,
              std::string* fault_summary) {
  if (!farm.Start() || !farm.WaitReady(-1, 60'000)) {
    ledger.Fail("the farm did not start: " + farm.error());
    return;
  }
  RoundControl control;
  std::vector<std::unique_ptr<SoakClient>> clients;
  for (int c = 0; c < config.clients; ++c) {
    clients.push_back(
        std::make_unique<SoakClient>(c, farm.endpoint(), config, mlp, control, ledger));
  }
  std::vector<std::thread> threads;
  for (auto& client : clients) threads.emplace_back([&client] { client->Run(); });
  bool alive = true;
  {
    FaultInjector faults(farm, config, clients, ledger);
    alive = faults.Run(Clock::now() + Ms(config.load_ms));
    *fault_summary = faults.Summary();
  }
  CheckRecovery(farm, alive, control, ledger);
  for (auto& t : threads) t.join();
  if (alive) CheckStop(farm, ledger);
  CheckErrorFraction(ledger);
}

// One round on a fresh farm. A failure is reported while the farm still exists, so its
// supervisor log follows the report.
void SoakRound(uint64_t seed, int round, const RoundConfig& config, const MlpReference& mlp) {
  std::printf("[ soak ] seed=%" PRIu64 " round=%d config=%s\n", seed, round,
              config.ToJson().dump().c_str());
  std::fflush(stdout);
  const auto start = Clock::now();
  // heartbeat_ms null: the documented default (1000), not the fixture's 200.
  Farm farm(config.ModelsJson(), {{"heartbeat_ms", nullptr}});
  RoundLedger ledger;
  std::string faults;
  Exercise(farm, config, mlp, ledger, &faults);
  const double seconds = std::chrono::duration_cast<Ms>(Clock::now() - start).count() / 1e3;
  std::printf("[ soak ] round=%d %.1f s: %s %s\n", round, seconds, ledger.Summary().c_str(),
              faults.c_str());
  std::fflush(stdout);
  if (ledger.failure_count() > 0) {
    ADD_FAILURE() << "soak failed: seed=" << seed << " round=" << round
                  << " config=" << config.ToJson().dump() << "\n"
                  << ledger.Report();
  }
}

TEST(Soak, RandomConfigsUnderFaultsKeepEveryInvariant) {
  const uint64_t seed = RunSeed();
  const int total_ms = static_cast<int>(EnvNumber("TORCHFARM_SOAK_SECONDS").value_or(60)) * 1000;
  const std::optional<uint64_t> only_round = EnvNumber("TORCHFARM_SOAK_ROUND");
  std::printf("[ soak ] seed=%" PRIu64 " (TORCHFARM_SOAK_SEED=%" PRIu64 " reproduces), %d s\n",
              seed, seed, total_ms / 1000);
  const MlpReference mlp;
  const auto start = Clock::now();
  for (int round = only_round ? static_cast<int>(*only_round) : 0;; ++round) {
    const int left_ms = total_ms - static_cast<int>(std::chrono::duration_cast<Ms>(
                                                        Clock::now() - start).count());
    const bool first = round == (only_round ? static_cast<int>(*only_round) : 0);
    if (!first && (only_round || left_ms < kMinRoundMs)) break;
    RoundConfig config = DrawRound(seed, round, AotiMlpPackage());
    config.load_ms = std::max(kMinRoundMs - kRoundOverheadMs,
                              std::min(config.load_ms, left_ms - kRoundOverheadMs));
    SoakRound(seed, round, config, mlp);
  }
}

}  // namespace
}  // namespace torchfarm::testing
