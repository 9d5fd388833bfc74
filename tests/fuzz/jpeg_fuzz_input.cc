#include "jpeg_fuzz_input.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "../integration/jpeg_writer.h"
#include "worker/jpeg_decoder.h"

namespace torchfarm::fuzz {
namespace {

using worker::DecodeJpegRgb;

[[noreturn]] void JpegFail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz invariant broken: %s: %s\n", what, detail.c_str());
  std::abort();
}

struct Reference {
  std::string jpeg;
  std::vector<uint8_t> rgb;
  int width = 0;
  int height = 0;
};

// The good JPEGs, decoded once before the first input (on a fresh handle).
const std::vector<Reference>& References() {
  static const std::vector<Reference> references = [] {
    testing::JpegOptions gray;
    gray.subsampling = TJSAMP_GRAY;
    gray.progressive = true;
    std::vector<Reference> out(2);
    out[0].jpeg = testing::NoiseJpeg(24, 16, 42);
    out[1].jpeg = testing::EncodePixels(testing::NoisePixels(17, 9, 1, 43), 17, 9, TJPF_GRAY, gray);
    for (Reference& r : out) {
      Status s = DecodeJpegRgb(r.jpeg, kFuzzMaxPixels, &r.rgb, &r.width, &r.height);
      if (!s.ok() || r.jpeg.empty()) JpegFail("reference JPEG does not decode", s.ToString());
    }
    return out;
  }();
  return references;
}

void CheckAccepted(std::string_view jpeg, const std::vector<uint8_t>& rgb, int width, int height) {
  const uint64_t pixels = static_cast<uint64_t>(width) * static_cast<uint64_t>(height);
  if (width < 1 || height < 1 || pixels > kFuzzMaxPixels || rgb.size() != pixels * 3) {
    JpegFail("accepted with an impossible size", std::to_string(width) + "x" +
                                                     std::to_string(height) + ", " +
                                                     std::to_string(rgb.size()) + " bytes");
  }
  std::vector<uint8_t> again;
  int w = 0, h = 0;
  Status under = DecodeJpegRgb(jpeg, pixels - 1, &again, &w, &h);
  if (under.code() != StatusCode::kInvalidArgument || !again.empty()) {
    JpegFail("max_pixels one under the size was not refused", under.ToString());
  }
  Status exact = DecodeJpegRgb(jpeg, pixels, &again, &w, &h);
  if (!exact.ok() || again != rgb || w != width || h != height) {
    JpegFail("decoding again at max_pixels = its size differs", exact.ToString());
  }
}

void CheckReferences() {
  for (const Reference& r : References()) {
    std::vector<uint8_t> rgb;
    int width = 0, height = 0;
    Status s = DecodeJpegRgb(r.jpeg, kFuzzMaxPixels, &rgb, &width, &height);
    if (!s.ok()) JpegFail("a good JPEG fails after a fuzz input", s.ToString());
    if (rgb != r.rgb || width != r.width || height != r.height) {
      JpegFail("a good JPEG decodes to other pixels after a fuzz input",
               std::to_string(width) + "x" + std::to_string(height));
    }
  }
}

}  // namespace

void RunJpegInput(const uint8_t* data, size_t size) {
  References();  // decoded before the first input touches this thread's decoder
  const std::string_view jpeg(reinterpret_cast<const char*>(data), size);
  std::vector<uint8_t> rgb;
  int width = 0, height = 0;
  Status s = DecodeJpegRgb(jpeg, kFuzzMaxPixels, &rgb, &width, &height);
  if (s.ok()) {
    CheckAccepted(jpeg, rgb, width, height);
  } else if (s.code() != StatusCode::kInvalidArgument || !rgb.empty() || s.message().empty()) {
    JpegFail("refused other than INVALID_ARGUMENT with a message and no pixels", s.ToString());
  }
  CheckReferences();
}

}  // namespace torchfarm::fuzz
