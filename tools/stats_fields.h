// Reading and formatting the fields of the admin replies ("stats", "health") for people.
//
// Owns: nothing; pure functions used by the stats table and the top view. Every lookup tolerates
// a missing key, a null and a value of the wrong type alike: it reads as absent, and absent values
// print as kMissing ("-"). So the tools work against older supervisors that send fewer fields.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace torchfarm {

inline constexpr const char* kMissing = "-";

// The value at `path` (nested object keys), or nullptr when a key is missing, a step is not an
// object, or the value is null.
const nlohmann::json* FindField(const nlohmann::json& object,
                                std::initializer_list<std::string_view> path);
// Numbers (and booleans, as 0/1) at `path`; nullopt for anything else.
std::optional<double> NumberField(const nlohmann::json& object,
                                  std::initializer_list<std::string_view> path);
// A string as-is, a number or boolean as JSON text, kMissing for absent, "" strings and
// objects/arrays.
std::string TextField(const nlohmann::json& object, std::initializer_list<std::string_view> path);
// A model's name as the tables show it: "NAME", or "NAME:VERSION" for a version other than "1"
// (README, "Model versions"). `name_key` is "name" in models[] and "model" in workers[].
std::string ModelLabel(const nlohmann::json& object, std::string_view name_key);
// A worker's "state", prefixed "spare " for a warm spare (role "spare": started, sent no batches).
std::string WorkerStateText(const nlohmann::json& worker);

// The array at `key` of `object`, or an empty array when it is absent or not an array.
const nlohmann::json& ArrayField(const nlohmann::json& object, std::string_view key);
// A latency percentile of a model: latency_us.<stage>.<percentile>, absent while the stage has
// recorded nothing yet ("count": 0), where the reply's 0 would read as "instant".
std::optional<double> LatencyField(const nlohmann::json& model, std::string_view stage,
                                   std::string_view percentile);
// True only for a boolean true at `path`.
bool FlagField(const nlohmann::json& object, std::initializer_list<std::string_view> path);

// 12345 (rounded to an integer).
std::string FormatCount(std::optional<double> value);
// 12345 below 10000, then 12.3k, 4.56M, 1.20G: short enough for top's columns.
std::string FormatCompactCount(std::optional<double> value);
// A fixed number of decimals: FormatDecimal(2.345, 1) == "2.3".
std::string FormatDecimal(std::optional<double> value, int decimals);
// Latencies given in microseconds: 850us, 1.25ms, 12.5ms, 3.40s.
std::string FormatMicros(std::optional<double> micros);
// Uptimes: 45s, 12m03s, 3h02m, 2d03h.
std::string FormatSeconds(std::optional<double> seconds);
// Memory sizes in bytes, binary units: 512B, 64.0K, 123.4M, 1.20G.
std::string FormatBytes(std::optional<double> bytes);

}  // namespace torchfarm
