// Test support: JPEGs the image-pipeline tests write themselves with libturbojpeg's compressor
// (no image files are checked in). Header-only; the test links libturbojpeg.
#pragma once

#include <turbojpeg.h>

#include <random>
#include <string>
#include <vector>

namespace torchfarm::testing {

// `rgb` (width x height x 3 bytes, row-major) compressed at quality 90, 4:2:0; "" on failure.
inline std::string EncodeJpeg(const std::vector<unsigned char>& rgb, int width, int height) {
  tjhandle handle = tjInitCompress();
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(handle, rgb.data(), width, 0, height, TJPF_RGB, &jpeg, &size,
                             TJSAMP_420, 90, 0);
  std::string out = rc == 0 ? std::string(reinterpret_cast<char*>(jpeg), size) : std::string();
  tjFree(jpeg);
  tjDestroy(handle);
  return out;
}

// A width x height picture of noise (decoding it takes a while, as real photos do).
inline std::string NoiseJpeg(int width, int height, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<unsigned char> pixels(static_cast<size_t>(width) * height * 3);
  for (auto& p : pixels) p = static_cast<unsigned char>(random());
  return EncodeJpeg(pixels, width, height);
}

}  // namespace torchfarm::testing
