#include "worker/image_decoder.h"

#include "worker/jpeg_decoder.h"

namespace torchfarm::worker {

Status DecodeJpeg(std::string_view jpeg, uint64_t max_pixels, at::Tensor* image) {
  at::Tensor pixels;
  int width = 0, height = 0;
  // Allocated only once the header passed its checks, then filled in place: no copy.
  Status status = DecodeJpegRgb(
      jpeg, max_pixels,
      [&pixels](int w, int h) {
        pixels = torch::empty({h, w, 3}, at::TensorOptions().dtype(at::kByte));
        return pixels.data_ptr<uint8_t>();
      },
      &width, &height);
  *image = status.ok() ? std::move(pixels) : at::Tensor();
  return status;
}

}  // namespace torchfarm::worker
