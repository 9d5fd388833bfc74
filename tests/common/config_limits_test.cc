// Every integer key of the config at and beyond its documented range, and at the widths where a
// value would wrap or be truncated on its way into the key's type (2^31, 2^32, 2^63-1, 2^64-1,
// negative): accepted at both ends, refused beyond them with a message naming the key, the range
// and the value. Plus the one bound on a model's workers and the keys of issue 22.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/worker_count.h"

namespace torchfarm {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Base() {
  return json::parse(R"({
    "models": [{"name": "m", "path": "m.pt", "inputs": [{"dtype": "float32", "shape": [-1, 4]}],
                "instances": [{"device": "cpu"}]}]
  })");
}

struct Key {
  std::string pointer;  // where the value goes, as a JSON pointer
  std::string where;    // how messages name it
  int64_t min;
  int64_t max;
  json patch = json::object();  // merged first, so both ends satisfy the cross-field checks
};

std::vector<Key> Keys() {
  const std::string m = "config.models[0]";
  const std::string i = m + ".instances[0]";
  return {
      {"/heartbeat_ms", "config.heartbeat_ms", 10, 600'000},
      {"/model_repository_poll_s", "config.model_repository_poll_s", 0, 86'400},
      {"/max_retries", "config.max_retries", 0, 100},
      {"/max_connections", "config.max_connections", 1, 1'000'000},
      {"/drain_timeout_ms", "config.drain_timeout_ms", 0, 86'400'000},
      {"/restart/initial_backoff_ms", "config.restart.initial_backoff_ms", 0, 3'600'000},
      {"/restart/max_backoff_ms", "config.restart.max_backoff_ms", 0, 3'600'000},
      {"/restart/max_restarts", "config.restart.max_restarts", 0, 1'000'000},
      {"/restart/window_ms", "config.restart.window_ms", 1, 86'400'000},
      {"/restart/healthy_after_ms", "config.restart.healthy_after_ms", 0, 86'400'000},
      {"/restart/failed_retry_ms", "config.restart.failed_retry_ms", 1'000, 86'400'000},
      {"/gpu/active_thread_percentage", "config.gpu.active_thread_percentage", 1, 100},
      {"/client_shm/max_region_bytes", "config.client_shm.max_region_bytes", 1, int64_t{1} << 40},
      {"/client_shm/max_total_bytes", "config.client_shm.max_total_bytes", 1, int64_t{1} << 40},
      {"/client_shm/max_regions", "config.client_shm.max_regions", 1, 65536},
      {"/client_shm/max_regions_per_client", "config.client_shm.max_regions_per_client", 1, 65536},
      {"/client_shm/idle_timeout_s", "config.client_shm.idle_timeout_s", 1, 30 * 86400},
      {"/frontend/threads", "config.frontend.threads", 1, 64},
      {"/frontend/max_connections", "config.frontend.max_connections", 1, 1'000'000},
      {"/frontend/idle_timeout_ms", "config.frontend.idle_timeout_ms", 100, 86'400'000},
      {"/frontend/request_timeout_ms", "config.frontend.request_timeout_ms", 100, 86'400'000},
      {"/frontend/max_header_bytes", "config.frontend.max_header_bytes", 1024, 1 << 20},
      {"/frontend/max_body_bytes",
       "config.frontend.max_body_bytes",
       1024,
       int64_t{4} << 30,
       {{"frontend", {{"max_inflight_body_bytes", int64_t{1} << 40}}}}},
      {"/frontend/max_inflight_body_bytes",
       "config.frontend.max_inflight_body_bytes",
       1024,
       int64_t{1} << 40,
       {{"frontend", {{"max_body_bytes", 1024}}}}},
      {"/limits/max_header_bytes", "config.limits.max_header_bytes", 256, 16 << 20},
      {"/limits/max_frames", "config.limits.max_frames", 2, 1025},
      {"/limits/max_rank", "config.limits.max_rank", 0, 8},
      {"/limits/max_tensor_bytes", "config.limits.max_tensor_bytes", 0, int64_t{1} << 40},
      {"/limits/max_request_bytes", "config.limits.max_request_bytes", 1024, int64_t{1} << 40},
      {"/limits/max_queued_per_client", "config.limits.max_queued_per_client", 1, 10'000'000},
      {"/limits/max_unread_replies_per_client", "config.limits.max_unread_replies_per_client", 1,
       1'000'000},
      {"/limits/max_unread_reply_bytes_per_client",
       "config.limits.max_unread_reply_bytes_per_client", int64_t{1} << 20, int64_t{1} << 40},
      {"/limits/max_shm_bytes", "config.limits.max_shm_bytes", int64_t{1} << 20, int64_t{1} << 50},
      {"/models/0/max_batch_size", m + ".max_batch_size", 1, 1 << 20},
      {"/models/0/max_queue_delay_us", m + ".max_queue_delay_us", 0, 60'000'000},
      {"/models/0/max_queue_size", m + ".max_queue_size", 1, 10'000'000},
      {"/models/0/max_queue_wait_ms", m + ".max_queue_wait_ms", 0, 86'400'000},
      {"/models/0/latency_slo_ms", m + ".latency_slo_ms", 0, 86'400'000},
      {"/models/0/max_inflight_per_worker", m + ".max_inflight_per_worker", 1, 64},
      {"/models/0/priority_levels", m + ".priority_levels", 1, 16},
      {"/models/0/default_priority_level",
       m + ".default_priority_level",
       1,
       16,
       {{"models", {{{"priority_levels", 16}}}}}},
      {"/models/0/slot_bytes", m + ".slot_bytes", 4096, int64_t{1} << 34},
      {"/models/0/hang_timeout_ms", m + ".hang_timeout_ms", 0, 86'400'000},
      {"/models/0/ring_slots",
       m + ".ring_slots",
       1,
       64,
       {{"models", {{{"max_inflight_per_worker", 1}}}}}},
      {"/models/0/rollout/max_surge",
       m + ".rollout.max_surge",
       0,
       64,
       {{"models", {{{"rollout", {{"max_unavailable", 1}}}}}}}},
      {"/models/0/rollout/max_unavailable", m + ".rollout.max_unavailable", 0, 64},
      {"/models/0/instances/0/count", i + ".count", 0, kMaxWorkersPerModel},
      {"/models/0/instances/0/threads", i + ".threads", 1, 1024},
      {"/models/0/instances/0/gpu_failures_before_fallback", i + ".gpu_failures_before_fallback", 1,
       1000},
      {"/models/0/instances/0/streams",
       i + ".streams",
       1,
       16,
       {{"models", {{{"max_inflight_per_worker", 16}, {"instances", {{{"device", "cuda:0"}}}}}}}}},
      {"/models/0/instances/0/idle_spin_us", i + ".idle_spin_us", 0, 100'000},
      {"/models/0/instances/0/cores/0",
       i + ".cores[0]",
       0,
       8191,
       {{"models", {{{"instances", {{{"cores", {0}}}}}}}}}},
  };
}

// Base() with `patch` merged in (arrays of objects merged entry by entry).
json Merge(json target, const json& patch) {
  if (patch.is_object() && target.is_object()) {
    for (const auto& [key, value] : patch.items())
      target[key] = Merge(target.value(key, json()), value);
    return target;
  }
  if (patch.is_array() && target.is_array() && !patch.empty() && patch[0].is_object()) {
    for (size_t k = 0; k < patch.size(); ++k) {
      if (k < target.size())
        target[k] = Merge(target[k], patch[k]);
      else
        target.push_back(patch[k]);
    }
    return target;
  }
  return patch;
}

Status Parse(const Key& key, const json& value) {
  json j = Merge(Base(), key.patch);
  j[json::json_pointer(key.pointer)] = value;
  FarmConfig c;
  return ParseConfig(j, "/base", &c);
}

TEST(ConfigLimitsTest, EveryIntegerKeyAtItsBoundsIsAccepted) {
  for (const Key& key : Keys()) {
    for (int64_t at : {key.min, key.max}) {
      Status s = Parse(key, json(at));
      EXPECT_TRUE(s.ok()) << key.where << " = " << at << ": " << s.message();
    }
  }
}

TEST(ConfigLimitsTest, EveryIntegerKeyBeyondItsBoundsIsRefusedByNameRangeAndValue) {
  const std::vector<json> wide = {json(int64_t{1} << 31),
                                  json(int64_t{1} << 32),
                                  json(INT64_MAX),
                                  json(INT64_MIN),
                                  json(uint64_t{1} << 63),
                                  json(UINT64_MAX),
                                  json(-1),
                                  json(1.5),
                                  json("7")};
  for (const Key& key : Keys()) {
    std::vector<json> beyond = {json(key.min - 1), json(key.max + 1)};
    for (const json& v : wide) {
      const bool inside = v.is_number_integer() && !v.is_number_unsigned() &&
                          v.get<int64_t>() >= key.min && v.get<int64_t>() <= key.max;
      if (!inside) beyond.push_back(v);
    }
    for (const json& v : beyond) {
      Status s = Parse(key, v);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << key.where << " = " << v.dump();
      EXPECT_THAT(s.message(), HasSubstr(key.where + ": expected an integer in " +
                                         std::to_string(key.min) + ".." + std::to_string(key.max) +
                                         ", got " + std::string(v.type_name()) + " " + v.dump()))
          << key.where << " = " << v.dump();
    }
  }
}

TEST(ConfigLimitsTest, AModelsWorkersAddUpToTheOneBound) {
  json j = Base();
  j["models"][0]["instances"] = {{{"count", 1000}}, {{"count", 24}}};
  FarmConfig c;
  EXPECT_TRUE(ParseConfig(j, "/base", &c).ok());
  j["models"][0]["instances"][1]["count"] = 25;
  Status s = ParseConfig(j, "/base", &c);
  EXPECT_EQ(s.message(),
            "config.models[0].instances[].count (sum): expected an integer in 0..1024 "
            "(workers of one model), got 1025");
  InstanceConfig automatic;
  automatic.count_auto = true;
  EXPECT_EQ(ResolveInstanceCount(automatic, 1'000'000), kMaxWorkersPerModel)
      << "\"auto\" never resolves beyond the bound";
}

TEST(ConfigLimitsTest, MaxConnectionsAndMaxShmBytesDefaultToDerived) {
  FarmConfig c;
  ASSERT_TRUE(ParseConfig(Base(), "/base", &c).ok());
  EXPECT_EQ(c.max_connections, 0) << "0: derived from the descriptor limit";
  EXPECT_EQ(c.limits.max_shm_bytes, 0u) << "0: the size of /dev/shm";
}

}  // namespace
}  // namespace torchfarm
