// The pipeline's decode stage as a tensor (worker/pipeline_stages.h): worker/jpeg_decoder.h's
// LibTorch-free decoder writing straight into a uint8 tensor, which a failed decode leaves behind
// undefined. Runs on the stage pool's threads (worker/thread_pool.h).
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace torchfarm::worker {

// Decodes `jpeg` into `*image`, uint8 [H, W, 3] RGB, C-contiguous. INVALID_ARGUMENT naming what is
// wrong (DecodeJpegRgb, worker/jpeg_decoder.h) for data that is not a JPEG, is truncated or
// corrupt, or declares more than `max_pixels` (pipeline.decode.max_pixels); then `*image` is
// undefined.
Status DecodeJpeg(std::string_view jpeg, uint64_t max_pixels, at::Tensor* image);

}  // namespace torchfarm::worker
