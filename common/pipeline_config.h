// A model's "pipeline" config section: the stages the worker runs around the model
// (worker/pipeline_stages.h), and how that section travels to the worker (--pipeline JSON).
//
//   "pipeline": {"decode": {"format": "jpeg", "threads": 2, "max_pixels": 67108864},
//                "preprocess": "pre.pt", "postprocess": "post.pt", "overlap": true}
//
// Owns: parsing and validating the section (keys, ranges, the model inputs it needs), naming the
// JSON path, the expected range and the value received in every error, and its JSON form for the
// worker's command line. Used by the supervisor's config (common/config.h) and the worker.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor_spec.h"

namespace torchfarm {

inline constexpr int kMinDecodeThreads = 1;
inline constexpr int kMaxDecodeThreads = 64;
inline constexpr int kDefaultDecodeThreads = 2;
// decode.max_pixels: width x height beyond which an image is refused before its pixels are
// allocated (a small file can declare a huge picture). Default 64 Mpx (192 MiB of RGB); at most
// 1 Gpx (3 GiB of RGB; libturbojpeg decodes at most 65500 x 65500 anyway).
inline constexpr int64_t kMinDecodeMaxPixels = 1;
inline constexpr int64_t kMaxDecodeMaxPixels = int64_t{1} << 30;
inline constexpr int64_t kDefaultDecodeMaxPixels = int64_t{64} << 20;

struct PipelineConfig {
  // "jpeg", or empty: no decode stage. With decode, the model's one input is bytes [-1]: one
  // encoded image per row.
  std::string decode_format;
  // The worker's stage pool: decodes and pre-processes the items of a batch in parallel (also
  // without decode, for preprocess).
  int threads = kDefaultDecodeThreads;
  // With decode: the largest picture decoded (kMinDecodeMaxPixels..kMaxDecodeMaxPixels).
  uint64_t max_pixels = kDefaultDecodeMaxPixels;
  // TorchScript files (absolute after parsing), or empty: no such stage.
  std::string preprocess;
  std::string postprocess;
  // Decode and pre-process the next ring slot while the model runs (double buffering); false:
  // each batch's stages run only when its turn comes (for comparison, bench/image_bench.py).
  bool overlap = true;

  bool enabled() const {
    return !decode_format.empty() || !preprocess.empty() || !postprocess.empty();
  }
  bool operator==(const PipelineConfig& other) const {
    return decode_format == other.decode_format && threads == other.threads &&
           max_pixels == other.max_pixels && preprocess == other.preprocess &&
           postprocess == other.postprocess && overlap == other.overlap;
  }
};

// Parses `j` (the "pipeline" value at `where`) for a model with `inputs`; relative module paths
// resolve against `base_dir`. Checks: known keys only; decode.format "jpeg"; decode.threads in
// kMinDecodeThreads..kMaxDecodeThreads; decode.max_pixels in
// kMinDecodeMaxPixels..kMaxDecodeMaxPixels; decode needs exactly one input of dtype bytes and shape
// [-1]; preprocess without decode needs exactly one input; a bytes input needs decode; and
// `has_warmup` is refused with decode (zero-filled bytes are no image).
Status ParsePipelineConfig(const nlohmann::json& j, const std::string& where,
                           const std::string& base_dir, const std::vector<TensorSpec>& inputs,
                           bool has_warmup, PipelineConfig* out);

// A model without a "pipeline": refuses bytes inputs (nothing would decode them).
Status CheckInputsWithoutPipeline(const std::vector<TensorSpec>& inputs, const std::string& where);

// The worker's --pipeline argument: a JSON object of the parsed fields; and back ("" <-> none).
std::string PipelineToJson(const PipelineConfig& pipeline);
Status PipelineFromJson(const std::string& text, PipelineConfig* out);

}  // namespace torchfarm
