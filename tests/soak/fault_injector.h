// The soak round's fault thread: at random times it SIGKILLs a worker or a zygote, SIGSTOPs a
// worker for 0.2-4 s, kills one slot's worker several times in a row as soon as it is back,
// starts a client that
// sends and then stops reading (and closes its socket with replies owed), or tells a reading
// client to send a burst. It checks on every step that the supervisor still runs.
//
// Restart-causing faults per worker slot are capped at kMaxRestartsPerSlot per round: more than
// the 5 restarts in 60 s that used to fail a slot for good (kills must never fail one), few
// enough that a slot restarted with the documented backoff (100 ms doubling, 25% jitter, capped
// at 5 s: README, "restart") is back well within the 10 s the round then allows.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "farm_fixture.h"
#include "round_ledger.h"
#include "soak_client.h"
#include "soak_config.h"

namespace torchfarm::testing {

class FaultInjector {
 public:
  static constexpr int kMaxRestartsPerSlot = 6;
  // A SIGSTOP this long may, with the second since the last heartbeat, reach 3 missed heartbeats
  // (heartbeat_ms 1000) and get the worker replaced: counted against the budget.
  static constexpr int kStopThatMayRestartMs = 1500;

  FaultInjector(Farm& farm, const RoundConfig& config,
                const std::vector<std::unique_ptr<SoakClient>>& clients, RoundLedger& ledger);
  // Joins the non-reading clients.
  ~FaultInjector();

  // Injects faults until `end` (or until the supervisor is gone), then SIGCONTs every stopped
  // worker and closes the non-reading clients' sockets. Returns false if the supervisor died.
  bool Run(std::chrono::steady_clock::time_point end);

  std::string Summary() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Worker {
    int id = -1;
    pid_t pid = -1;
    std::string state;
  };
  struct Stopped {
    pid_t pid = -1;
    Clock::time_point resume_at;
  };

  std::vector<Worker> Workers() const;
  // A worker with a process and restart budget left (any, when `slot` < 0); false if none.
  bool Pick(int slot, Worker* out);
  void Kill(const Worker& worker, const std::string& why);
  void KillOne();
  void StopOne();
  void KillStorm(Clock::time_point end);
  void StartNonReadingClient();
  void KillZygote();
  void Burst();
  // Sleeps until `until`, resuming stopped workers on time.
  void SleepUntil(Clock::time_point until);
  void ResumeStopped(bool all);

  Farm& farm_;
  const RoundConfig& config_;
  const std::vector<std::unique_ptr<SoakClient>>& clients_;
  RoundLedger& ledger_;
  std::mt19937_64 rng_;
  std::vector<Stopped> stopped_;
  std::map<int, int> restart_faults_;  // worker slot id -> faults that may restart it
  std::vector<std::thread> non_reading_;
  std::atomic<bool> close_non_reading_{false};
  int kills_ = 0, stops_ = 0, storms_ = 0, non_reading_clients_ = 0, bursts_ = 0;
  int zygote_kills_ = 0;
};

}  // namespace torchfarm::testing
