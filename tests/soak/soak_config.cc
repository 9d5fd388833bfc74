#include "soak_config.h"

#include <algorithm>

#include "farm_fixture.h"

namespace torchfarm::testing {

using nlohmann::json;

int Uniform(std::mt19937_64& rng, int low, int high) {
  return std::uniform_int_distribution<int>(low, high)(rng);
}

bool Chance(std::mt19937_64& rng, int percent) { return Uniform(rng, 0, 99) < percent; }

json ModelDraw::ConfigJson() const {
  json extra = {{"max_inflight_per_worker", max_inflight_per_worker},
                {"max_batch_size", max_batch_size},
                {"max_queue_delay_us", max_queue_delay_us},
                {"priority_levels", priority_levels},
                {"fair_queueing", fair_queueing}};
  if (ring_slots > 0) extra["ring_slots"] = ring_slots;
  if (!preferred_batch_sizes.empty()) extra["preferred_batch_sizes"] = preferred_batch_sizes;
  json instance = {{"device", "cpu"}, {"count", workers}, {"spares", spares}};
  if (idle_spin_us >= 0) instance["idle_spin_us"] = idle_spin_us;
  extra["instances"] = json::array({instance});
  json entry = ModelEntry(name, name + ".pt", {-1, columns}, workers, extra);
  if (!aoti_package.empty()) entry["path"] = aoti_package;
  return entry;
}

json RoundConfig::ModelsJson() const {
  json entries = json::array();
  for (const auto& m : models) entries.push_back(m.ConfigJson());
  return entries;
}

json RoundConfig::ToJson() const {
  json entries = json::array();
  for (const auto& m : models) {
    json entry = m.ConfigJson();
    entry.erase("path");
    if (!m.aoti_package.empty()) entry["format"] = "aoti";
    entries.push_back(std::move(entry));
  }
  return {{"round_seed", seed},       {"load_ms", load_ms},
          {"clients", clients},       {"pipeline_depth", pipeline_depth},
          {"deadline_percent", deadline_percent}, {"mlp_percent", mlp_percent},
          {"models", entries}};
}

namespace {

ModelDraw DrawModel(std::mt19937_64& rng, const std::string& name, int64_t columns) {
  ModelDraw m;
  m.name = name;
  m.columns = columns;
  m.workers = Uniform(rng, 1, 3);
  m.spares = Chance(rng, 30) ? 1 : 0;
  if (Chance(rng, 30)) m.idle_spin_us = Uniform(rng, 0, 1000);
  m.max_inflight_per_worker = Uniform(rng, 1, 8);
  if (Chance(rng, 50)) {
    m.ring_slots = Uniform(rng, m.max_inflight_per_worker, 2 * m.max_inflight_per_worker + 2);
  }
  m.max_batch_size = Uniform(rng, 1, 32);
  m.max_queue_delay_us = Uniform(rng, 0, 2000);
  m.priority_levels = Uniform(rng, 1, 3);
  if (Chance(rng, 30)) {
    for (int n = Uniform(rng, 1, 3); n > 0; --n) {
      m.preferred_batch_sizes.push_back(Uniform(rng, 1, m.max_batch_size));
    }
    std::sort(m.preferred_batch_sizes.begin(), m.preferred_batch_sizes.end());
    m.preferred_batch_sizes.erase(
        std::unique(m.preferred_batch_sizes.begin(), m.preferred_batch_sizes.end()),
        m.preferred_batch_sizes.end());
  }
  m.fair_queueing = Chance(rng, 70);
  return m;
}

}  // namespace

RoundConfig DrawRound(uint64_t seed, int round, const std::string& aoti_mlp) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(round)};
  std::mt19937_64 rng(seq);
  RoundConfig c;
  c.seed = rng();
  c.load_ms = Uniform(rng, 5000, 12000);
  // Identity rows of 32 B to 8 KiB: a batch of 32 rows of 2048 floats reaches the 128 KiB
  // zero-copy reply path.
  static constexpr int64_t kIdentityColumns[] = {8, 64, 256, 1024, 2048};
  c.models.push_back(DrawModel(rng, "identity", kIdentityColumns[Uniform(rng, 0, 4)]));
  if (Chance(rng, 50)) {
    c.models.push_back(DrawModel(rng, "mlp", 256));
    c.mlp_percent = Uniform(rng, 10, 50);
  }
  c.clients = Uniform(rng, 2, 8);
  c.pipeline_depth = Uniform(rng, 1, 16);
  c.deadline_percent = Uniform(rng, 0, 30);
  const bool as_package = Chance(rng, 50);
  if (as_package && !aoti_mlp.empty() && c.models.size() > 1) c.models[1].aoti_package = aoti_mlp;
  return c;
}

}  // namespace torchfarm::testing
