// JPEG decoding for the worker's pipeline (worker/pipeline_stages.h), with libturbojpeg.
//
// Owns: one TurboJPEG decompressor handle per calling thread (thread_local, freed when the thread
// ends: a handle is not safe to share between threads), and the checks on what an image may
// cost before its pixels are allocated. Runs on the stage pool's threads (worker/thread_pool.h).
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace torchfarm::worker {

// Width x height beyond which an image is refused before decoding (a small file can declare a
// huge picture): 64 megapixels, 192 MiB of RGB.
inline constexpr int64_t kMaxImagePixels = int64_t{64} << 20;

// Decodes `jpeg` into `*image`, uint8 [H, W, 3] RGB, C-contiguous. INVALID_ARGUMENT naming what is
// wrong for data that is not a JPEG, is truncated or corrupt (libturbojpeg's warnings count as
// errors: a half-grey picture is no answer), or declares more than kMaxImagePixels.
Status DecodeJpeg(std::string_view jpeg, at::Tensor* image);

}  // namespace torchfarm::worker
