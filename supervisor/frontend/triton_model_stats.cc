// Triton's model statistics JSON (triton_model_stats.h).
#include "supervisor/frontend/triton_model_stats.h"

#include <cstdint>

#include "supervisor/frontend/v2_inference.h"

namespace torchfarm {
namespace {

using nlohmann::json;

uint64_t Counter(const json& statistics, const char* key) {
  auto it = statistics.find(key);
  if (it == statistics.end() || !it->is_number_integer()) return 0;
  return it->is_number_unsigned() || it->get<int64_t>() >= 0 ? it->get<uint64_t>() : 0;
}

json Duration(uint64_t count, uint64_t micros) { return {{"count", count}, {"ns", micros * 1000}}; }

json EntryStats(const json& model) {
  static const json kNone = json::object();
  auto found = model.find("statistics");
  const json& s = found != model.end() && found->is_object() ? *found : kNone;
  const uint64_t requests = Counter(s, "requests");
  auto last = s.find("last_inference_ms");
  return {{"name", model.value("name", "")},
          {"version", model.value("version", "1")},
          {"last_inference", last != s.end() && last->is_number_integer() ? *last : json(0)},
          {"inference_count", Counter(s, "rows")},
          {"execution_count", Counter(s, "batches")},
          {"inference_stats",
           {{"success", Duration(requests, Counter(s, "total_us"))},
            {"fail", Duration(Counter(s, "errors"), 0)},
            {"queue", Duration(requests, Counter(s, "queue_us"))},
            {"compute_input", Duration(requests, 0)},
            {"compute_infer", Duration(requests, Counter(s, "compute_us"))},
            {"compute_output", Duration(requests, 0)},
            {"cache_hit", Duration(0, 0)},
            {"cache_miss", Duration(0, 0)}}},
          {"batch_stats", json::array()}};
}

}  // namespace

Status TritonModelStatsJson(const json& meta, const std::string& name, const std::string& version,
                            json* out) {
  json stats = json::array();
  if (!name.empty()) {
    // Checks the name (and the version when given) in the words every endpoint uses.
    const json* chosen = nullptr;
    if (Status s = FindModelVersionInMeta(meta, name, version, &chosen); !s.ok()) return s;
  }
  auto models = meta.find("models");
  if (models != meta.end() && models->is_array()) {
    for (const json& model : *models) {
      if (!model.is_object()) continue;
      if (!name.empty() && model.value("name", "") != name) continue;
      if (!version.empty() && model.value("version", "1") != version) continue;
      stats.push_back(EntryStats(model));
    }
  }
  *out = {{"model_stats", std::move(stats)}};
  return Status::Ok();
}

}  // namespace torchfarm
