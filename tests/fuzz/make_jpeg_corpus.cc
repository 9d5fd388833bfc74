// Writes tests/fuzz/jpeg_corpus/: the seed inputs of the JPEG decoder fuzzer (jpeg_fuzz_input.h),
// one encoded item each, made with libturbojpeg's compressor so no image files are copied in:
// mixed sizes and subsamplings, qualities 10 to 100, grayscale, progressive, CMYK (YCCK with an
// Adobe marker), truncated ones, and every bad kind the unit tests refuse
// (tests/integration/bad_jpegs.h). Build and run (the files are committed; rerun after changing
// the seeds):
//   cmake --build build --target make_jpeg_corpus && build/bin/make_jpeg_corpus
//   tests/fuzz/jpeg_corpus
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "../integration/bad_jpegs.h"
#include "../integration/jpeg_writer.h"
#include "jpeg_fuzz_input.h"

namespace {

using namespace torchfarm::testing;

// A smooth picture with a little noise (small files that still exercise every block).
std::vector<unsigned char> Picture(int width, int height, int channels, unsigned seed) {
  std::vector<unsigned char> pixels = NoisePixels(width, height, channels, seed);
  for (size_t i = 0; i < pixels.size(); ++i) {
    const size_t x = (i / channels) % width, y = (i / channels) / width;
    pixels[i] = static_cast<unsigned char>((x * 7 + y * 5 + (i % channels) * 60) % 256 / 2 +
                                           pixels[i] % 32);
  }
  return pixels;
}

std::vector<std::pair<std::string, std::string>> Seeds() {
  std::vector<std::pair<std::string, std::string>> seeds;
  auto rgb = [&](const std::string& name, int w, int h, JpegOptions options) {
    seeds.emplace_back(name, EncodePixels(Picture(w, h, 3, w * 131 + h), w, h, TJPF_RGB, options));
  };
  const std::pair<int, const char*> subsamplings[] = {{TJSAMP_444, "444"}, {TJSAMP_422, "422"},
                                                      {TJSAMP_420, "420"}, {TJSAMP_440, "440"},
                                                      {TJSAMP_411, "411"}, {TJSAMP_GRAY, "gray"}};
  for (const auto& [subsampling, name] : subsamplings) {
    JpegOptions options;
    options.subsampling = subsampling;
    rgb(std::string("baseline_") + name + "_23x17", 23, 17, options);
    options.progressive = true;
    rgb(std::string("progressive_") + name + "_23x17", 23, 17, options);
  }
  const int sizes[][2] = {{1, 1}, {8, 8}, {16, 16}, {100, 3}, {3, 100}, {64, 48}};
  for (const auto& size : sizes) {
    rgb("baseline_420_" + std::to_string(size[0]) + "x" + std::to_string(size[1]), size[0], size[1],
        JpegOptions{});
  }
  for (int quality : {10, 100}) {
    JpegOptions options;
    options.quality = quality;
    rgb("quality_" + std::to_string(quality) + "_31x21", 31, 21, options);
  }
  JpegOptions gray;
  gray.subsampling = TJSAMP_GRAY;
  seeds.emplace_back("gray_from_gray_19x11",
                     EncodePixels(Picture(19, 11, 1, 3), 19, 11, TJPF_GRAY, gray));
  for (bool progressive : {false, true}) {
    JpegOptions cmyk;
    cmyk.subsampling = TJSAMP_444;
    cmyk.progressive = progressive;
    seeds.emplace_back(std::string("cmyk_adobe_") + (progressive ? "progressive_" : "") + "16x12",
                       EncodePixels(AdobeCmykOf(Picture(16, 12, 3, 5)), 16, 12, TJPF_CMYK, cmyk));
  }
  const std::string whole = EncodePixels(Picture(40, 30, 3, 9), 40, 30, TJPF_RGB, JpegOptions{});
  seeds.emplace_back("truncated_in_scan_40x30", whole.substr(0, whole.size() * 2 / 3));
  seeds.emplace_back("truncated_in_header_40x30", whole.substr(0, 300));
  for (const BadJpeg& bad : BadJpegs(torchfarm::fuzz::kFuzzMaxPixels)) {
    seeds.emplace_back("bad_" + bad.name, bad.bytes);
  }
  return seeds;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  int written = 0;
  for (const auto& [name, bytes] : Seeds()) {
    if (bytes.empty() && name != "bad_empty") {
      std::fprintf(stderr, "make_jpeg_corpus: could not encode %s\n", name.c_str());
      return 1;
    }
    std::ofstream(std::string(argv[1]) + "/" + name, std::ios::binary) << bytes;
    ++written;
  }
  std::printf("wrote %d seeds to %s\n", written, argv[1]);
  return 0;
}
