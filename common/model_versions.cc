#include "common/model_versions.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/config.h"
#include "common/config_fields.h"

namespace torchfarm {

using nlohmann::json;
using config_fields::Got;
namespace fs = std::filesystem;

namespace {

bool AllDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out.empty() ? "none" : out;
}

Status ReadJsonFile(const fs::path& path, json* out) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("cannot open '" + path.string() + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  *out = json::parse(buffer.str(), nullptr, false);
  if (out->is_discarded() || !out->is_object()) {
    return InvalidArgument("'" + path.string() +
                           "' is not a JSON object (the model entry "
                           "without \"name\" and \"path\")");
  }
  return Status::Ok();
}

// The version folders of one model folder: each must hold model.pt.
Status ScanVersions(const fs::path& folder, const std::string& where,
                    std::vector<VersionSource>* out) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec)) {
    const std::string version = entry.path().filename().string();
    if (version.empty() || version[0] == '.' || version == "config.json") continue;
    if (!entry.is_directory()) {
      return InvalidArgument(where + ": '" + entry.path().string() +
                             "' is neither config.json nor a version folder");
    }
    if (!ValidVersion(version)) {
      return InvalidArgument(where + ": version folder '" + entry.path().string() +
                             "': expected a version of 1.." + std::to_string(kMaxVersionLength) +
                             " letters, digits, '_', '-' or '.'");
    }
    const fs::path model_file = entry.path() / "model.pt";
    if (!fs::is_regular_file(model_file)) {
      return InvalidArgument(where + ": version folder '" + entry.path().string() +
                             "' has no model.pt");
    }
    out->push_back({version, model_file.lexically_normal().string()});
  }
  if (ec)
    return InvalidArgument(where + ": cannot list '" + folder.string() + "': " + ec.message());
  if (out->empty()) {
    return InvalidArgument(where + ": '" + folder.string() +
                           "' has no version folder (expected VERSION/model.pt)");
  }
  if (out->size() > kMaxVersions) {
    return InvalidArgument(where + ": '" + folder.string() + "' has " +
                           std::to_string(out->size()) + " version folders, at most " +
                           std::to_string(kMaxVersions) + " are supported");
  }
  std::sort(out->begin(), out->end(), [](const VersionSource& a, const VersionSource& b) {
    return VersionLess(a.version, b.version);
  });
  return Status::Ok();
}

}  // namespace

bool ValidVersion(const std::string& version) {
  if (version.empty() || version.size() > kMaxVersionLength) return false;
  return std::all_of(version.begin(), version.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

bool VersionLess(const std::string& a, const std::string& b) {
  if (AllDigits(a) && AllDigits(b)) {
    // Compared as numbers of any length: leading zeros dropped, then shorter is smaller.
    const std::string x = a.substr(std::min(a.find_first_not_of('0'), a.size()));
    const std::string y = b.substr(std::min(b.find_first_not_of('0'), b.size()));
    if (x.size() != y.size()) return x.size() < y.size();
    if (x != y) return x < y;
    return a < b;  // "01" and "1": equal numbers, still distinct strings
  }
  return a < b;
}

Status ParseVersionPolicy(const json& j, const std::string& where, VersionPolicy* out) {
  const std::string expected =
      ": expected {\"latest\": N}, {\"specific\": [\"1\", ...]} or \"all\", got ";
  VersionPolicy policy;
  if (j.is_string() && j.get<std::string>() == "all") {
    policy.kind = VersionPolicy::Kind::kAll;
  } else if (j.is_object() && j.size() == 1 && j.contains("latest")) {
    const json& n = j["latest"];
    if (!n.is_number_integer() || n.get<int64_t>() < 1 ||
        n.get<int64_t>() > static_cast<int64_t>(kMaxVersions)) {
      return InvalidArgument(where + ".latest: expected an integer in 1.." +
                             std::to_string(kMaxVersions) + ", got " + Got(n));
    }
    policy.latest = n.get<size_t>();
  } else if (j.is_object() && j.size() == 1 && j.contains("specific")) {
    const json& list = j["specific"];
    if (!list.is_array() || list.empty() || list.size() > kMaxVersions) {
      return InvalidArgument(where + ".specific: expected an array of 1.." +
                             std::to_string(kMaxVersions) + " version strings, got " + Got(list));
    }
    policy.kind = VersionPolicy::Kind::kSpecific;
    for (const json& v : list) {
      if (!v.is_string() || !ValidVersion(v.get<std::string>())) {
        return InvalidArgument(where + ".specific: expected version strings of 1.." +
                               std::to_string(kMaxVersionLength) +
                               " letters, digits, '_', '-' or '.', got " + Got(v));
      }
      if (std::find(policy.specific.begin(), policy.specific.end(), v.get<std::string>()) !=
          policy.specific.end()) {
        return InvalidArgument(where + ".specific: version " + v.dump() + " is listed twice");
      }
      policy.specific.push_back(v.get<std::string>());
    }
  } else {
    return InvalidArgument(where + expected + Got(j));
  }
  *out = std::move(policy);
  return Status::Ok();
}

Status ApplyVersionPolicy(const VersionPolicy& policy, std::vector<std::string> available,
                          const std::string& where, std::vector<std::string>* out) {
  std::sort(available.begin(), available.end(), VersionLess);
  std::vector<std::string> chosen;
  switch (policy.kind) {
    case VersionPolicy::Kind::kAll:
      chosen = available;
      break;
    case VersionPolicy::Kind::kLatest: {
      const size_t n = std::min(policy.latest, available.size());
      chosen.assign(available.end() - static_cast<std::ptrdiff_t>(n), available.end());
      break;
    }
    case VersionPolicy::Kind::kSpecific:
      for (const std::string& v : policy.specific) {
        if (std::find(available.begin(), available.end(), v) == available.end()) {
          return InvalidArgument(where + ".specific: version \"" + v +
                                 "\" is not among the model's versions (" + Join(available) + ")");
        }
      }
      for (const std::string& v : available) {
        if (std::find(policy.specific.begin(), policy.specific.end(), v) != policy.specific.end()) {
          chosen.push_back(v);
        }
      }
      break;
  }
  *out = std::move(chosen);
  return Status::Ok();
}

Status ScanModelRepository(const std::string& dir, const std::string& where,
                           std::vector<RepositoryModel>* out) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return InvalidArgument(where +
                           ": expected a folder of NAME/config.json and "
                           "NAME/VERSION/model.pt, '" +
                           dir + "' is not a folder");
  }
  std::vector<RepositoryModel> models;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    const std::string model_where = where + " model '" + name + "'";
    if (!entry.is_directory()) {
      return InvalidArgument(model_where + ": '" + entry.path().string() +
                             "' is not a model folder (NAME/config.json, NAME/VERSION/model.pt)");
    }
    RepositoryModel model;
    model.name = name;
    if (Status s = ReadJsonFile(entry.path() / "config.json", &model.entry); !s.ok()) {
      return InvalidArgument(model_where + ": " + s.message());
    }
    if (Status s = ScanVersions(entry.path(), model_where, &model.versions); !s.ok()) return s;
    models.push_back(std::move(model));
  }
  if (ec) return InvalidArgument(where + ": cannot list '" + dir + "': " + ec.message());
  std::sort(models.begin(), models.end(),
            [](const RepositoryModel& a, const RepositoryModel& b) { return a.name < b.name; });
  *out = std::move(models);
  return Status::Ok();
}

std::vector<std::string> VersionsOf(const std::vector<ModelConfig>& models,
                                    const std::string& name) {
  std::vector<std::string> versions;
  for (const ModelConfig& m : models) {
    if (m.name == name) versions.push_back(m.version);
  }
  std::sort(versions.begin(), versions.end(), VersionLess);
  return versions;
}

Status SelectServedVersion(const std::vector<ModelConfig>& models, const std::string& name,
                           const std::string& version,
                           const std::function<bool(size_t index)>& loaded, size_t* index) {
  size_t best = models.size(), best_loaded = models.size();
  for (size_t i = 0; i < models.size(); ++i) {
    if (models[i].name != name) continue;
    if (!version.empty()) {
      if (models[i].version == version) best = i;
      continue;
    }
    if (best == models.size() || VersionLess(models[best].version, models[i].version)) best = i;
    if ((!loaded || loaded(i)) && (best_loaded == models.size() ||
                                   VersionLess(models[best_loaded].version, models[i].version))) {
      best_loaded = i;
    }
  }
  if (version.empty() && best_loaded != models.size()) best = best_loaded;
  if (best != models.size()) {
    *index = best;
    return Status::Ok();
  }
  const std::vector<std::string> versions = VersionsOf(models, name);
  if (!versions.empty()) return VersionNotLoaded(name, version, versions);
  std::vector<std::string> names;
  for (const ModelConfig& m : models) {
    if (std::find(names.begin(), names.end(), m.name) == names.end()) names.push_back(m.name);
  }
  return ModelNotServed(name, names);
}

namespace {

// A client's name for a message: shortened past kMaxQuoted bytes, with its size.
std::string Quoted(const std::string& name) {
  constexpr size_t kMaxQuoted = 128;
  if (name.size() <= kMaxQuoted) return "'" + name + "'";
  return "'" + name.substr(0, kMaxQuoted) + "...' (" + std::to_string(name.size()) + " bytes)";
}

}  // namespace

Status ModelNotServed(const std::string& name, const std::vector<std::string>& served) {
  return NotFound("model " + Quoted(name) + " is not served here (served: " + Join(served) + ")");
}

Status VersionNotLoaded(const std::string& name, const std::string& version,
                        const std::vector<std::string>& versions) {
  return NotFound("model " + Quoted(name) + " has no version " + Quoted(version) +
                  " (loaded versions: " + Join(versions) + ")");
}

}  // namespace torchfarm
