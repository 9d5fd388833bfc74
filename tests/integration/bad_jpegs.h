// Test support: the items a decode stage must refuse, each with a piece of the error that names
// it, shared by the decoder's unit test (tests/worker/jpeg_decoder_test.cc), the pipeline's
// (tests/worker/pipeline_stages_test.cc), the farm test (tests/integration/pipeline_test.cc) and
// the fuzz seeds (tests/fuzz/make_jpeg_corpus.cc). Header-only; links libturbojpeg.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "jpeg_writer.h"

namespace torchfarm::testing {

struct BadJpeg {
  std::string name;
  std::string bytes;
  std::string says;  // a piece of the INVALID_ARGUMENT message
};

// A 1x1 PNG (signature, IHDR, IDAT, IEND).
inline std::string PngBytes() {
  static const unsigned char kPng[] = {
      0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48,
      0x44, 0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00,
      0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x78,
      0x9c, 0x63, 0x00, 0x01, 0x00, 0x00, 0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00,
      0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
  return std::string(reinterpret_cast<const char*>(kPng), sizeof(kPng));
}

// SOI and a baseline frame header claiming width x height (3 components), nothing after.
inline std::string FrameHeaderOnly(int width, int height) {
  std::string jpeg = "\xff\xd8\xff\xc0";
  const unsigned char frame[] = {0x00,
                                 0x11,
                                 0x08,
                                 static_cast<unsigned char>(height >> 8),
                                 static_cast<unsigned char>(height & 0xff),
                                 static_cast<unsigned char>(width >> 8),
                                 static_cast<unsigned char>(width & 0xff),
                                 0x03,
                                 0x01,
                                 0x22,
                                 0x00,
                                 0x02,
                                 0x11,
                                 0x01,
                                 0x03,
                                 0x11,
                                 0x01};
  return jpeg + std::string(reinterpret_cast<const char*>(frame), sizeof(frame));
}

// The good JPEG the bad ones are made from (truncated, resized).
inline std::string SourceJpeg() { return NoiseJpeg(64, 48, 5); }

// A frame size just over `max_pixels` (by less than one row): height ~ sqrt(max_pixels), at most
// 65535 x 65535. Requires max_pixels < 65535 * 65535.
inline void SizeJustOver(uint64_t max_pixels, int* width, int* height) {
  *height = static_cast<int>(std::sqrt(static_cast<double>(max_pixels)));
  if (*height < 1) *height = 1;
  *width = static_cast<int>(max_pixels / static_cast<uint64_t>(*height)) + 1;
}

// Every kind of bad item, for a decoder whose limit is `max_pixels`.
inline std::vector<BadJpeg> BadJpegs(uint64_t max_pixels) {
  const std::string good = SourceJpeg();
  std::string corrupt;
  for (int k = 0; k < 10; ++k) corrupt += "\xff\xd8garbage";
  int width = 0, height = 0;
  SizeJustOver(max_pixels, &width, &height);
  return {
      {"corrupt", corrupt, "corrupt JPEG header: "},
      {"truncated", good.substr(0, good.size() / 2), "truncated or corrupt JPEG: "},
      {"png", PngBytes(), "not a JPEG: expected ff d8 first, got 89 50 4e 47"},
      {"empty", "", "not a JPEG: expected ff d8 first, got 0 bytes"},
      {"soi_only", std::string("\xff\xd8", 2), "corrupt JPEG header: "},
      {"sof_65535x65535", FrameHeaderOnly(65535, 65535),
       "JPEG of 65535x65535 = 4294836225 pixels; at most "},
      {"just_over_max_pixels", WithFrameSize(good, width, height),
       "JPEG of " + std::to_string(width) + "x" + std::to_string(height) + " = " +
           std::to_string(static_cast<uint64_t>(width) * static_cast<uint64_t>(height)) +
           " pixels; at most " + std::to_string(max_pixels) + " (decode.max_pixels)"},
  };
}

}  // namespace torchfarm::testing
