// The names of a model's inputs and outputs (README.md "Configuration", docs/protocol.md).
//
// Owns: what a tensor name may be ([A-Za-z0-9_.:-], 1..64 characters), the defaults a model's
// unnamed tensors get (INPUT__k, OUTPUT__k, as Triton's PyTorch backend names them), and reading
// an optional "name" from a JSON tensor entry. Used by the config parser, the request header
// parser and the supervisor; no process state.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/tensor_spec.h"

namespace torchfarm {

inline constexpr size_t kMaxTensorNameBytes = 64;

// Letters, digits, '_', '.', ':' and '-'.
bool TensorNameChar(char c);
// 1..kMaxTensorNameBytes characters, each a TensorNameChar.
bool ValidTensorName(std::string_view name);
// "INPUT__3", "OUTPUT__0".
std::string DefaultInputName(size_t index);
std::string DefaultOutputName(size_t index);

// Reads the optional "name" of the object `entry` (a tensor entry at `where`, e.g.
// "config.models[0].inputs[1]"). Absent: *out is left empty and *present false. Present but not
// a valid name: INVALID_ARGUMENT naming `where`.name, what is allowed and what was received.
Status TensorNameFromJson(const nlohmann::json& entry, const std::string& where, std::string* out,
                          bool* present);

// OK when no name appears twice; else INVALID_ARGUMENT naming `where`[k].name of the second one.
Status CheckUniqueTensorNames(const std::vector<std::string>& names, const std::string& where);

// A model's declared inputs or outputs (config "inputs" / "outputs" at `where`): a non-empty
// JSON array of at most `max_count` {"name"?, "dtype", "shape"} (-1: a variable dimension).
// Unnamed entries get DefaultInputName(k) or DefaultOutputName(k) (`outputs`); the names, given
// or default, must be unique. Fills one spec and one name per entry.
Status NamedTensorListFromJson(const nlohmann::json& list, const std::string& where,
                               size_t max_count, bool outputs, std::vector<TensorSpec>* specs,
                               std::vector<std::string>* names);

// "x, y, z": names for error messages.
std::string JoinTensorNames(const std::vector<std::string>& names);

}  // namespace torchfarm
