// Test support: JPEGs the image-pipeline tests write themselves with libturbojpeg's compressor
// (no image files are checked in, but the fuzz seeds tests/fuzz/make_jpeg_corpus.cc writes):
// RGB at any subsampling, grayscale, progressive, and CMYK (YCCK with an Adobe marker).
// Header-only; the test links libturbojpeg.
#pragma once

#include <turbojpeg.h>

#include <random>
#include <string>
#include <vector>

namespace torchfarm::testing {

struct JpegOptions {
  int subsampling = TJSAMP_420;  // TJSAMP_GRAY: a one-component (grayscale) JPEG
  int quality = 90;
  bool progressive = false;
};

// `pixels` (width x height pixels of `pixel_format`: TJPF_RGB, TJPF_GRAY or TJPF_CMYK, row-major)
// compressed; "" on failure. TJPF_CMYK writes a YCCK JPEG with an Adobe APP14 marker, whose
// decoder reads the values as Adobe's inverted CMYK (worker/jpeg_decoder.h).
inline std::string EncodePixels(const std::vector<unsigned char>& pixels, int width, int height,
                                int pixel_format, const JpegOptions& options) {
  tjhandle handle = tjInitCompress();
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  const int flags = options.progressive ? TJFLAG_PROGRESSIVE : 0;
  const int rc = tjCompress2(handle, pixels.data(), width, 0, height, pixel_format, &jpeg, &size,
                             options.subsampling, options.quality, flags);
  std::string out = rc == 0 ? std::string(reinterpret_cast<char*>(jpeg), size) : std::string();
  tjFree(jpeg);
  tjDestroy(handle);
  return out;
}

// `rgb` (width x height x 3 bytes, row-major) compressed at quality 90, 4:2:0; "" on failure.
inline std::string EncodeJpeg(const std::vector<unsigned char>& rgb, int width, int height) {
  return EncodePixels(rgb, width, height, TJPF_RGB, JpegOptions{});
}

// width x height x channels bytes of noise.
inline std::vector<unsigned char> NoisePixels(int width, int height, int channels, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<unsigned char> pixels(static_cast<size_t>(width) * height * channels);
  for (auto& p : pixels) p = static_cast<unsigned char>(random());
  return pixels;
}

// A width x height picture of noise (decoding it takes a while, as real photos do).
inline std::string NoiseJpeg(int width, int height, unsigned seed) {
  return EncodeJpeg(NoisePixels(width, height, 3, seed), width, height);
}

// `rgb` as the CMYK a print shop would store for it without black ink, in Adobe's inverted form
// (stored = 255 - ink: R, G, B, 255), so that it decodes back to about `rgb`.
inline std::vector<unsigned char> AdobeCmykOf(const std::vector<unsigned char>& rgb) {
  std::vector<unsigned char> cmyk;
  cmyk.reserve(rgb.size() / 3 * 4);
  for (size_t i = 0; i + 2 < rgb.size(); i += 3) {
    cmyk.insert(cmyk.end(), {rgb[i], rgb[i + 1], rgb[i + 2], 255});
  }
  return cmyk;
}

// `jpeg` with its first frame header (SOFn) claiming width x height; the rest unchanged.
inline std::string WithFrameSize(std::string jpeg, int width, int height) {
  size_t pos = 2;
  while (pos + 4 <= jpeg.size() && static_cast<unsigned char>(jpeg[pos]) == 0xff) {
    const auto marker = static_cast<unsigned char>(jpeg[pos + 1]);
    const size_t length = (static_cast<unsigned char>(jpeg[pos + 2]) << 8) |
                          static_cast<unsigned char>(jpeg[pos + 3]);
    if (marker >= 0xc0 && marker <= 0xc2 && pos + 9 <= jpeg.size()) {
      jpeg[pos + 5] = static_cast<char>(height >> 8);
      jpeg[pos + 6] = static_cast<char>(height & 0xff);
      jpeg[pos + 7] = static_cast<char>(width >> 8);
      jpeg[pos + 8] = static_cast<char>(width & 0xff);
      break;
    }
    pos += 2 + length;
  }
  return jpeg;
}

}  // namespace torchfarm::testing
