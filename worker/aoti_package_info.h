// What the worker reads from an AOTInductor package's metadata before it runs the package, and the
// checks that decide whether this worker may load it (worker/aoti_model_runner.h).
//
// Owns: parsing the metadata map (the package's *_metadata.json: AOTI_DEVICE_KEY, AOTI_CPU_ISA,
// and the torchfarm_* keys tools/export_model.py adds through aot_inductor.metadata) and the pure
// fit checks: device, CPU features, torch version, batch rows. No LibTorch here: the parser is
// unit-tested with hostile metadata (tests/worker/aoti_package_info_test.cc), and every error
// names what was expected and what the package holds.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/tensor_spec.h"

namespace torchfarm::worker {

struct AotiPackageInfo {
  std::string device_key;            // AOTI_DEVICE_KEY: "cpu", "cuda" (empty: not recorded)
  std::vector<std::string> cpu_isa;  // AOTI_CPU_ISA words: "AVX512", "AVX512_VNNI", "AMX_TILE"
  std::string torch_version;         // torchfarm_torch_version "2.15.0"; empty: not recorded
  // torchfarm_batch: rows the package accepts along dim 0. A package compiled for a fixed batch
  // has min_rows == max_rows. Both 0: not recorded (a package not made by export_model.py).
  int64_t min_rows = 0;
  int64_t max_rows = 0;
  std::vector<TensorSpec> inputs;   // torchfarm_inputs ([-1, 256]: -1 the batch dimension)
  std::vector<TensorSpec> outputs;  // torchfarm_outputs
  bool fixed_batch() const { return max_rows > 0 && min_rows == max_rows; }
  // "1..256", "4 only" or "not recorded", for logs and errors.
  std::string BatchText() const;
};

// Parses the metadata map; InvalidArgument naming the key, what was expected and what it holds.
// Keys the worker does not use are ignored; absent torchfarm_* keys leave their fields empty.
Status ParseAotiPackageInfo(const std::unordered_map<std::string, std::string>& metadata,
                            AotiPackageInfo* out);

// The package was compiled for `device_type` ("cpu" or "cuda") and for a CPU with every feature
// in `cpu_flags` (/proc/cpuinfo's "flags" words) and by a torch of the same major.minor as this
// LibTorch. FailedPrecondition-like InvalidArgument with the reason and how to fix it otherwise.
Status CheckAotiPackageFits(const AotiPackageInfo& info, const std::string& device_type,
                            const std::set<std::string>& cpu_flags, int torch_major,
                            int torch_minor);

// The /proc/cpuinfo flag an AOTI_CPU_ISA word needs ("AVX512" -> "avx512f", "AVX2" -> "avx2",
// "AMX_TILE" -> "amx_tile").
std::string CpuFlagOfIsa(const std::string& isa);

// The "flags" words of the first processor in /proc/cpuinfo's text.
std::set<std::string> ParseCpuFlags(const std::string& cpuinfo);

// A batch of `rows` rows fits the package's recorded batch range; InvalidArgument naming the range
// (and, for a fixed-batch package, that it was compiled for that batch only) otherwise.
// A dynamic range that starts above 1 row (torch.export could not keep batch 1 dynamic, e.g. an
// nn.TransformerEncoder: export_model.py then compiles 2..N) takes fewer rows padded with zeros
// up to min_rows; their outputs are cut back. A fixed-batch package is never padded.
Status CheckAotiRows(const AotiPackageInfo& info, int64_t rows);
// The rows a batch of `rows` runs as: min_rows for a smaller batch of a dynamic range, else rows.
int64_t AotiRunRows(const AotiPackageInfo& info, int64_t rows);

// Input `index` of a batch has the dtype, rank and non-batch dimensions the package's
// torchfarm_inputs record (-1: any); InvalidArgument naming both otherwise. OK when the package
// records no inputs: its generated code checks them (AOTI_RUNTIME_CHECK_INPUTS), though with a
// vaguer message.
Status CheckAotiInput(const AotiPackageInfo& info, size_t index, DType dtype,
                      const std::vector<int64_t>& shape);

}  // namespace torchfarm::worker
