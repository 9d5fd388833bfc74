// Model versions (README.md, "Model versions"): what a version string may be, how versions order,
// which versions a `version_policy` loads, how a Triton-style model repository folder
// (DIR/NAME/config.json + DIR/NAME/VERSION/model.pt) lists its models, and which loaded version a
// request gets.
//
// Owns: those rules, as pure functions over strings, JSON and the file system (the repository
// scan reads folders, nothing else). The config parser (common/config.cc) expands each model
// entry into one ModelConfig per loaded version; the supervisor's job intake routes by
// SelectServedVersion. Any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace torchfarm {

struct ModelConfig;

// A version string: 1..kMaxVersionLength of [A-Za-z0-9_.-].
constexpr size_t kMaxVersionLength = 32;
// Versions one model may list (a "versions" array, a repository folder) or load.
constexpr size_t kMaxVersions = 64;
// The version of a model entry that lists none.
constexpr const char* kDefaultModelVersion = "1";

bool ValidVersion(const std::string& version);
// Version order for "latest": numeric when both are unsigned integers ("9" < "10"), else string
// order. A strict weak order over valid versions.
bool VersionLess(const std::string& a, const std::string& b);

// "version_policy": {"latest": N} (the N highest; the default, N = 1), {"specific": [...]} or
// "all".
struct VersionPolicy {
  enum class Kind { kLatest, kSpecific, kAll };
  Kind kind = Kind::kLatest;
  size_t latest = 1;
  std::vector<std::string> specific;
};

// Parses `j` (the value of "version_policy"); errors name `where`.
Status ParseVersionPolicy(const nlohmann::json& j, const std::string& where, VersionPolicy* out);
// The versions of `available` the policy loads, in ascending version order. A "specific" version
// that is not available is an error naming the ones that are.
Status ApplyVersionPolicy(const VersionPolicy& policy, std::vector<std::string> available,
                          const std::string& where, std::vector<std::string>* out);

// One version of a model as the config or a repository folder gives it.
struct VersionSource {
  std::string version;
  std::string path;  // as written; config.cc resolves a relative one against the config's folder
};

// A model folder of a repository: DIR/NAME with its config.json (the model entry without "path")
// and one VersionSource per DIR/NAME/VERSION folder holding model.pt.
struct RepositoryModel {
  std::string name;
  nlohmann::json entry;
  std::vector<VersionSource> versions;  // absolute paths, ascending version order
};

// Lists the models of repository folder `dir` (absolute), in name order. Entries whose names
// start with '.' are skipped; every other entry must be a model folder with a config.json and
// version folders with a model.pt. Errors name `where` and the file or folder at fault.
Status ScanModelRepository(const std::string& dir, const std::string& where,
                           std::vector<RepositoryModel>* out);

// The NOT_FOUND of a model name no endpoint serves, and of a version a served model has not
// loaded: one wording for the ZeroMQ path, HTTP and gRPC ("model 'x' is not served here (served:
// a, b)", "model 'a' has no version '7' (loaded versions: 1, 2)"). A name or version over 128
// bytes is shortened in the message and its size given.
Status ModelNotServed(const std::string& name, const std::vector<std::string>& served);
Status VersionNotLoaded(const std::string& name, const std::string& version,
                        const std::vector<std::string>& versions);

// Which of `models` (one entry per loaded version) a request for (`name`, `version`) runs on.
// An empty `version` picks the default: the highest version for which `loaded(index)` is true,
// else (none loaded yet) the highest. NOT_FOUND names the models, or the versions of `name`.
// `loaded` may be empty: every version counts as loaded.
Status SelectServedVersion(const std::vector<ModelConfig>& models, const std::string& name,
                           const std::string& version,
                           const std::function<bool(size_t index)>& loaded, size_t* index);

// The versions of `name` among `models`, ascending.
std::vector<std::string> VersionsOf(const std::vector<ModelConfig>& models,
                                    const std::string& name);

}  // namespace torchfarm
