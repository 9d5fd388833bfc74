#include "worker/aoti_package_info.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>

#include "common/dtype.h"

namespace torchfarm::worker {
namespace {

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

const std::string* Find(const std::unordered_map<std::string, std::string>& metadata,
                        const std::string& key) {
  auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

// A positive row count of torchfarm_batch; nullopt for anything else.
std::optional<int64_t> ParseRows(const std::string& text) {
  if (text.empty() || text.size() > 12) return std::nullopt;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  const int64_t rows = std::stoll(text);
  if (rows < 1) return std::nullopt;
  return rows;
}

Status ParseBatch(const std::string& text, AotiPackageInfo* out) {
  const std::string expected =
      "torchfarm_batch: expected rows \"N\" or a range \"MIN..MAX\" (1 <= MIN <= MAX), got '" +
      text + "'";
  const size_t dots = text.find("..");
  std::optional<int64_t> low, high;
  if (dots == std::string::npos) {
    low = high = ParseRows(text);
  } else {
    low = ParseRows(text.substr(0, dots));
    high = ParseRows(text.substr(dots + 2));
  }
  if (!low || !high || *low > *high) return InvalidArgument(expected);
  out->min_rows = *low;
  out->max_rows = *high;
  return Status::Ok();
}

Status ParseSpecs(const std::string& key, const std::string& text, std::vector<TensorSpec>* out) {
  const std::string expected = key + ": expected a JSON list of {\"dtype\", \"shape\"}";
  nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array()) return InvalidArgument(expected + ", got '" + text.substr(0, 200) + "'");
  out->clear();
  for (size_t i = 0; i < parsed.size(); ++i) {
    const nlohmann::json& entry = parsed[i];
    const std::string where = key + "[" + std::to_string(i) + "]";
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array()) {
      // The type, not entry.dump(): dump() recurses, and the metadata is the package's to choose
      // (a 100k-deep [[[...]]] would overflow the compute thread's stack).
      return InvalidArgument(
          where + ": expected {\"dtype\": string, \"shape\": [ints]}, got " +
          std::string(entry.is_object() ? "an object without them" : entry.type_name()));
    }
    std::optional<DType> dtype = ParseDType(entry["dtype"].get<std::string>());
    if (!dtype) {
      return InvalidArgument(where + ".dtype: expected one of " + AllDTypeNames() + ", got '" +
                             entry["dtype"].get<std::string>() + "'");
    }
    TensorSpec spec{*dtype, {}};
    if (entry["shape"].size() > kMaxRank) {
      return InvalidArgument(where + ".shape: expected at most " + std::to_string(kMaxRank) +
                             " dimensions, got " + std::to_string(entry["shape"].size()));
    }
    for (const nlohmann::json& dim : entry["shape"]) {
      if (!dim.is_number_integer() || dim.get<int64_t>() < -1) {
        return InvalidArgument(where + ".shape: expected integers >= -1, got " +
                               (dim.is_number_integer() ? std::to_string(dim.get<int64_t>())
                                                        : std::string(dim.type_name())));
      }
      spec.shape.push_back(dim.get<int64_t>());
    }
    out->push_back(std::move(spec));
  }
  return Status::Ok();
}

}  // namespace

std::string AotiPackageInfo::BatchText() const {
  if (max_rows == 0) return "not recorded";
  if (fixed_batch()) return std::to_string(max_rows) + " only";
  return std::to_string(min_rows) + ".." + std::to_string(max_rows);
}

Status ParseAotiPackageInfo(const std::unordered_map<std::string, std::string>& metadata,
                            AotiPackageInfo* out) {
  AotiPackageInfo info;
  if (const std::string* device = Find(metadata, "AOTI_DEVICE_KEY")) info.device_key = *device;
  if (const std::string* isa = Find(metadata, "AOTI_CPU_ISA")) {
    std::istringstream words(*isa);
    for (std::string word; words >> word;) info.cpu_isa.push_back(word);
  }
  if (const std::string* version = Find(metadata, "torchfarm_torch_version")) {
    int major = 0, minor = 0;
    if (std::sscanf(version->c_str(), "%d.%d", &major, &minor) != 2 || major < 0 || minor < 0) {
      return InvalidArgument("torchfarm_torch_version: expected a version like \"2.15.0\", got '" +
                             *version + "'");
    }
    info.torch_version = *version;
  }
  if (const std::string* batch = Find(metadata, "torchfarm_batch")) {
    if (Status status = ParseBatch(*batch, &info); !status.ok()) return status;
  }
  if (const std::string* inputs = Find(metadata, "torchfarm_inputs")) {
    if (Status status = ParseSpecs("torchfarm_inputs", *inputs, &info.inputs); !status.ok())
      return status;
  }
  if (const std::string* outputs = Find(metadata, "torchfarm_outputs")) {
    if (Status status = ParseSpecs("torchfarm_outputs", *outputs, &info.outputs); !status.ok())
      return status;
  }
  *out = std::move(info);
  return Status::Ok();
}

std::string CpuFlagOfIsa(const std::string& isa) {
  // Inductor's "AVX512" is its x86 AVX-512 baseline (F, BW, DQ, VL); avx512f names it in cpuinfo.
  if (isa == "AVX512") return "avx512f";
  return Lower(isa);
}

std::set<std::string> ParseCpuFlags(const std::string& cpuinfo) {
  std::set<std::string> flags;
  std::istringstream lines(cpuinfo);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream words(line.substr(colon + 1));
    for (std::string word; words >> word;) flags.insert(word);
    break;  // every core of one machine reports the same features
  }
  return flags;
}

Status CheckAotiPackageFits(const AotiPackageInfo& info, const std::string& device_type,
                            const std::set<std::string>& cpu_flags, int torch_major,
                            int torch_minor) {
  if (!info.device_key.empty() && info.device_key != device_type) {
    return InvalidArgument("the package was compiled for device '" + info.device_key +
                           "' and this worker runs on '" + device_type + "': export it again for " +
                           device_type +
                           " (torch._inductor.aoti_compile_and_package with the model and "
                           "inputs on that device)");
  }
  if (device_type == "cpu" && !cpu_flags.empty()) {
    std::string missing;
    for (const std::string& isa : info.cpu_isa) {
      if (cpu_flags.count(CpuFlagOfIsa(isa)) == 0) missing += (missing.empty() ? "" : " ") + isa;
    }
    if (!missing.empty()) {
      return InvalidArgument("the package was compiled for a CPU with " + missing +
                             ", which this CPU lacks (AOTInductor compiles for the exporting "
                             "machine's CPU): export it on a machine of this CPU type");
    }
  }
  if (!info.torch_version.empty()) {
    int major = 0, minor = 0;
    std::sscanf(info.torch_version.c_str(), "%d.%d", &major, &minor);
    if (major != torch_major || minor != torch_minor) {
      return InvalidArgument("the package was compiled by torch " + info.torch_version +
                             " and this worker runs LibTorch " + std::to_string(torch_major) + "." +
                             std::to_string(torch_minor) +
                             ": AOTInductor packages load only in the torch release that compiled "
                             "them; export it again with this release");
    }
  }
  return Status::Ok();
}

int64_t AotiRunRows(const AotiPackageInfo& info, int64_t rows) {
  if (info.max_rows == 0 || info.fixed_batch() || rows < 1) return rows;
  return std::max(rows, info.min_rows);
}

Status CheckAotiRows(const AotiPackageInfo& info, int64_t rows) {
  const int64_t run = AotiRunRows(info, rows);
  if (info.max_rows == 0 || (run >= info.min_rows && run <= info.max_rows)) return Status::Ok();
  if (info.fixed_batch()) {
    return InvalidArgument("this AOTInductor package was compiled for a fixed batch of " +
                           std::to_string(info.max_rows) +
                           " rows and serves that batch only; got " + std::to_string(rows) +
                           " rows (export it with a dynamic batch: torch.export.Dim)");
  }
  return InvalidArgument("this AOTInductor package takes " + std::to_string(info.min_rows) + ".." +
                         std::to_string(info.max_rows) +
                         " rows (its torch.export.Dim range); got " + std::to_string(rows) +
                         " rows");
}

Status CheckAotiInput(const AotiPackageInfo& info, size_t index, DType dtype,
                      const std::vector<int64_t>& shape) {
  if (index >= info.inputs.size()) return Status::Ok();  // the count is checked by the caller
  const TensorSpec& spec = info.inputs[index];
  const std::string where = "input " + std::to_string(index);
  if (dtype != spec.dtype) {
    return InvalidArgument(where + ": the package was compiled for " +
                           std::string(DTypeName(spec.dtype)) + ", got " +
                           std::string(DTypeName(dtype)));
  }
  bool fits = shape.size() == spec.shape.size();
  for (size_t d = 1; fits && d < shape.size(); ++d) {
    fits = spec.shape[d] == -1 || spec.shape[d] == shape[d];
  }
  if (fits) return Status::Ok();
  return InvalidArgument(where + ": the package was compiled for shape " +
                         ShapeToString(spec.shape) + " (-1: any), got " + ShapeToString(shape));
}

}  // namespace torchfarm::worker
