// The soak test's configuration space (issue 15): what one round draws from the documented ranges
// of the model settings (README.md, "Configuration"), and the load and fault rates it runs with.
// Everything not drawn here stays at its documented default: restart policy, heartbeat_ms,
// max_retries, hang_timeout_ms, max_queue_size, slot_bytes, threads, limits.
//
// Pure data and drawing; the same seed and round give the same config on every machine.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace torchfarm::testing {

// One served model's drawn settings.
struct ModelDraw {
  std::string name;      // "identity" ([-1, columns]) or "mlp" ([-1, 256] -> [-1, 128])
  int64_t columns = 0;   // the fixed dimension of the input
  int workers = 1;       // 1..3 CPU workers, threads left at the default (1)
  int spares = 0;        // instances[].spares: 0 or 1 (documented 0..64; 2 cores hold one)
  int idle_spin_us = -1; // instances[].idle_spin_us 0..1000; -1: unset (the default, 300)
  int max_inflight_per_worker = 2;  // 1..8
  int ring_slots = 0;               // 0: unset (default max(4, max_inflight)); else max_inflight..2*max_inflight+2
  int max_batch_size = 1;           // 1..32
  int max_queue_delay_us = 0;       // 0..2000
  int priority_levels = 1;          // 1..3
  std::vector<int> preferred_batch_sizes;  // empty: unset
  bool fair_queueing = true;                // true (the default) or false; drawn last
  // mlp only: served as this AOTInductor package (the same weights as mkmodel's mlp.pt, from
  // tools/export_model.py) instead of the TorchScript file; empty: mlp.pt.
  std::string aoti_package;

  // The "models[]" entry of the config.
  nlohmann::json ConfigJson() const;
};

// One round: a fresh farm serving `models`, `clients` reading client threads with up to
// `pipeline_depth` requests in flight each, faults for `load_ms`.
struct RoundConfig {
  uint64_t seed = 0;  // of this round's request contents and fault schedule
  int load_ms = 0;
  std::vector<ModelDraw> models;  // identity first; mlp in about half the rounds
  int clients = 2;                // 2..8
  int pipeline_depth = 1;         // 1..16
  int deadline_percent = 0;       // 0..30: requests that carry a timeout_ms of 50..500
  int mlp_percent = 0;            // requests that go to mlp when it is served

  // The config's "models" array.
  nlohmann::json ModelsJson() const;
  // Everything drawn, for the log and the failure message.
  nlohmann::json ToJson() const;
};

int Uniform(std::mt19937_64& rng, int low, int high);  // inclusive
bool Chance(std::mt19937_64& rng, int percent);

// Round `round` of run `seed`, independent of how many rounds ran before it. load_ms is drawn
// in 5..12 s; the caller may shorten it to fit the time left.
// `aoti_mlp`: the AOTInductor mlp package a venv build has (empty in a Debian build); a round that
// serves mlp serves it as that package half the time (drawn after everything else, so a seed
// draws the same settings in both builds).
RoundConfig DrawRound(uint64_t seed, int round, const std::string& aoti_mlp = "");

}  // namespace torchfarm::testing
