#include "worker/image_decoder.h"

#include <turbojpeg.h>

#include <memory>
#include <string>

namespace torchfarm::worker {
namespace {

struct HandleDeleter {
  void operator()(void* handle) const {
    if (handle) tjDestroy(handle);
  }
};
using TurboHandle = std::unique_ptr<void, HandleDeleter>;

// This thread's decompressor, created on first use.
tjhandle ThreadDecompressor() {
  thread_local TurboHandle handle(tjInitDecompress());
  return handle.get();
}

std::string TurboError(tjhandle handle) { return tjGetErrorStr2(handle); }

}  // namespace

Status DecodeJpeg(std::string_view jpeg, at::Tensor* image) {
  tjhandle handle = ThreadDecompressor();
  if (!handle)
    return Internal(std::string("cannot create a JPEG decompressor: ") + tjGetErrorStr2(nullptr));
  if (jpeg.size() < 2 || static_cast<uint8_t>(jpeg[0]) != 0xff ||
      static_cast<uint8_t>(jpeg[1]) != 0xd8) {
    return InvalidArgument("not a JPEG: expected the bytes ff d8 first, got " +
                           std::to_string(jpeg.size()) + " bytes that start otherwise");
  }
  const auto* data = reinterpret_cast<const unsigned char*>(jpeg.data());
  const auto size = static_cast<unsigned long>(jpeg.size());
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(handle, data, size, &width, &height, &subsampling, &colorspace) != 0) {
    return InvalidArgument("corrupt JPEG header: " + TurboError(handle));
  }
  if (width <= 0 || height <= 0) {
    return InvalidArgument("corrupt JPEG header: no frame (size " + std::to_string(width) + "x" +
                           std::to_string(height) + ")");
  }
  if (int64_t{width} * height > kMaxImagePixels) {
    return InvalidArgument("JPEG of " + std::to_string(width) + "x" + std::to_string(height) +
                           " pixels; at most " + std::to_string(kMaxImagePixels) +
                           " pixels are decoded");
  }
  *image = torch::empty({height, width, 3}, at::TensorOptions().dtype(at::kByte));
  if (tjDecompress2(handle, data, size, image->data_ptr<uint8_t>(), width, 0, height, TJPF_RGB,
                    0) != 0) {
    *image = at::Tensor();
    const bool warning = tjGetErrorCode(handle) == TJERR_WARNING;
    return InvalidArgument(std::string(warning ? "truncated or corrupt JPEG: " : "corrupt JPEG: ") +
                           TurboError(handle));
  }
  return Status::Ok();
}

}  // namespace torchfarm::worker
