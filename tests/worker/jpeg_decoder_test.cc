// The JPEG decoder's LibTorch-free core (worker/jpeg_decoder.h), no processes: every kind of bad
// item refused with INVALID_ARGUMENT naming the problem, after which good JPEGs decode to exactly
// the pixels they gave before (many times on one thread, and on several threads at once: the
// per-thread handle is recreated after each failure); max_pixels at its limit and one past it;
// grayscale, progressive and CMYK (Adobe) JPEGs into RGB; the marker scan.
#include "worker/jpeg_decoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "../integration/bad_jpegs.h"
#include "../integration/jpeg_writer.h"
#include "common/pipeline_config.h"

namespace torchfarm::worker {
namespace {

using ::testing::HasSubstr;
using ::torchfarm::testing::AdobeCmykOf;
using ::torchfarm::testing::BadJpeg;
using ::torchfarm::testing::BadJpegs;
using ::torchfarm::testing::EncodePixels;
using ::torchfarm::testing::FrameHeaderOnly;
using ::torchfarm::testing::JpegOptions;
using ::torchfarm::testing::NoiseJpeg;
using ::torchfarm::testing::NoisePixels;
using ::torchfarm::testing::PngBytes;

struct Decoded {
  Status status;
  std::vector<uint8_t> rgb;
  int width = 0;
  int height = 0;
};

Decoded Decode(const std::string& jpeg, uint64_t max_pixels = kDefaultDecodeMaxPixels) {
  Decoded d;
  d.status = DecodeJpegRgb(jpeg, max_pixels, &d.rgb, &d.width, &d.height);
  return d;
}

// A smooth picture (gradients), on which JPEG's loss is small.
std::vector<unsigned char> Gradient(int width, int height) {
  std::vector<unsigned char> rgb(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      unsigned char* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = static_cast<unsigned char>(200);
      p[1] = static_cast<unsigned char>(x * 255 / width);
      p[2] = static_cast<unsigned char>(y * 255 / height);
    }
  }
  return rgb;
}

// Good JPEGs of every layout, and what each decodes to on a fresh thread.
struct GoodSet {
  std::vector<std::string> jpegs;
  std::vector<Decoded> reference;
};

GoodSet Goods() {
  GoodSet set;
  JpegOptions progressive;
  progressive.progressive = true;
  JpegOptions gray;
  gray.subsampling = TJSAMP_GRAY;
  JpegOptions cmyk;
  cmyk.subsampling = TJSAMP_444;
  const std::vector<unsigned char> noise = NoisePixels(33, 17, 3, 7);
  set.jpegs = {NoiseJpeg(64, 48, 1), EncodePixels(noise, 33, 17, TJPF_RGB, progressive),
               EncodePixels(noise, 33, 17, TJPF_RGB, gray),
               EncodePixels(AdobeCmykOf(Gradient(24, 16)), 24, 16, TJPF_CMYK, cmyk)};
  std::thread fresh([&set] {
    for (const std::string& jpeg : set.jpegs) set.reference.push_back(Decode(jpeg));
  });
  fresh.join();
  return set;
}

// Each bad item, then every good JPEG, `rounds` times; failures added to the running test.
void BadThenGood(const GoodSet& goods, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    for (const BadJpeg& bad : BadJpegs(kDefaultDecodeMaxPixels)) {
      SCOPED_TRACE(bad.name + ", round " + std::to_string(round));
      const Decoded refused = Decode(bad.bytes);
      ASSERT_EQ(refused.status.code(), StatusCode::kInvalidArgument) << refused.status.ToString();
      EXPECT_THAT(refused.status.message(), HasSubstr(bad.says));
      EXPECT_TRUE(refused.rgb.empty());
      for (size_t k = 0; k < goods.jpegs.size(); ++k) {
        const Decoded again = Decode(goods.jpegs[k]);
        ASSERT_TRUE(again.status.ok()) << "good JPEG " << k << ": " << again.status.ToString();
        ASSERT_EQ(again.rgb, goods.reference[k].rgb) << "good JPEG " << k << " decoded otherwise";
      }
    }
  }
}

TEST(JpegDecoderTest, EveryBadItemIsRefusedAndTheNextGoodJpegsDecodeAsBefore) {
  const GoodSet goods = Goods();
  for (const Decoded& d : goods.reference) ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  BadThenGood(goods, 50);
}

TEST(JpegDecoderTest, EachThreadRecoversOnItsOwn) {
  const GoodSet goods = Goods();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&goods] { BadThenGood(goods, 10); });
  for (std::thread& thread : threads) thread.join();
}

TEST(JpegDecoderTest, MaxPixelsAtItsLimitDecodesAndOnePixelMoreIsRefusedBeforeDecoding) {
  const std::string jpeg = NoiseJpeg(10, 12, 3);
  const Decoded at_limit = Decode(jpeg, 120);
  ASSERT_TRUE(at_limit.status.ok()) << at_limit.status.ToString();
  EXPECT_EQ(at_limit.width, 10);
  EXPECT_EQ(at_limit.height, 12);
  EXPECT_EQ(at_limit.rgb.size(), 10u * 12u * 3u);
  const Decoded over = Decode(jpeg, 119);
  EXPECT_EQ(over.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(over.status.message(), "JPEG of 10x12 = 120 pixels; at most 119 (decode.max_pixels)");
  EXPECT_EQ(over.width, 0);
  // The smallest limit and the smallest picture.
  const Decoded one = Decode(NoiseJpeg(1, 1, 4), kMinDecodeMaxPixels);
  ASSERT_TRUE(one.status.ok()) << one.status.ToString();
  EXPECT_EQ(one.rgb.size(), 3u);
  // Refused on the frame header, before anything is allocated: the destination is never asked.
  for (const BadJpeg& bad : BadJpegs(119)) {
    if (bad.name != "just_over_max_pixels" && bad.name != "sof_65535x65535") continue;
    bool asked = false;
    int width = 0, height = 0;
    Status s = DecodeJpegRgb(
        bad.bytes, 119,
        [&asked](int, int) {
          asked = true;
          return nullptr;
        },
        &width, &height);
    EXPECT_THAT(s.message(), HasSubstr(bad.says)) << bad.name;
    EXPECT_FALSE(asked) << bad.name;
  }
  EXPECT_TRUE(Decode(jpeg, 120).status.ok());
}

TEST(JpegDecoderTest, GrayscaleDecodesToThreeEqualChannels) {
  const std::vector<unsigned char> gray = NoisePixels(19, 11, 1, 9);
  JpegOptions options;
  options.subsampling = TJSAMP_GRAY;
  const Decoded d = Decode(EncodePixels(gray, 19, 11, TJPF_GRAY, options));
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  ASSERT_EQ(d.rgb.size(), 19u * 11u * 3u);
  int far = 0;
  for (size_t i = 0; i < gray.size(); ++i) {
    EXPECT_EQ(d.rgb[3 * i], d.rgb[3 * i + 1]);
    EXPECT_EQ(d.rgb[3 * i], d.rgb[3 * i + 2]);
    far += std::abs(int{d.rgb[3 * i]} - int{gray[i]}) > 40 ? 1 : 0;
  }
  EXPECT_LT(far, 10) << "the grey levels are not the source's";
}

TEST(JpegDecoderTest, ProgressiveDecodesToTheBaselinePixels) {
  const std::vector<unsigned char> noise = NoisePixels(45, 29, 3, 11);
  JpegOptions progressive;
  progressive.progressive = true;
  const Decoded baseline = Decode(EncodePixels(noise, 45, 29, TJPF_RGB, JpegOptions{}));
  const Decoded d = Decode(EncodePixels(noise, 45, 29, TJPF_RGB, progressive));
  ASSERT_TRUE(baseline.status.ok()) << baseline.status.ToString();
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  // The same coefficients, only entropy-coded in several scans.
  EXPECT_EQ(d.rgb, baseline.rgb);
}

TEST(JpegDecoderTest, AdobeCmykDecodesToTheRgbItWasMadeFrom) {
  const std::vector<unsigned char> rgb = Gradient(32, 24);
  JpegOptions options;
  options.subsampling = TJSAMP_444;
  options.quality = 95;
  const std::string jpeg = EncodePixels(AdobeCmykOf(rgb), 32, 24, TJPF_CMYK, options);
  ASSERT_FALSE(jpeg.empty());
  EXPECT_TRUE(ScanJpegMarkers(jpeg).adobe);
  EXPECT_EQ(ScanJpegMarkers(jpeg).components, 4);
  const Decoded d = Decode(jpeg);
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  ASSERT_EQ(d.rgb.size(), rgb.size());
  int worst = 0;
  for (size_t i = 0; i < rgb.size(); ++i) worst = std::max(worst, std::abs(d.rgb[i] - rgb[i]));
  EXPECT_LE(worst, 12) << "CMYK decoded to other colours (inverted?)";
}

TEST(JpegDecoderTest, TheMarkerScanReadsTheFrameAndStopsAtTheFirstScanOrABrokenSegment) {
  const std::string jpeg = NoiseJpeg(40, 30, 2);
  const JpegMarkers m = ScanJpegMarkers(jpeg);
  EXPECT_TRUE(m.has_frame);
  EXPECT_EQ(m.width, 40);
  EXPECT_EQ(m.height, 30);
  EXPECT_EQ(m.components, 3);
  EXPECT_FALSE(m.adobe);
  const JpegMarkers header_only = ScanJpegMarkers(FrameHeaderOnly(65535, 65535));
  EXPECT_TRUE(header_only.has_frame);
  EXPECT_EQ(header_only.width, 65535);
  // Cut inside the first segment, or not a JPEG at all: nothing is read.
  EXPECT_FALSE(ScanJpegMarkers(jpeg.substr(0, 8)).has_frame);
  EXPECT_FALSE(ScanJpegMarkers(PngBytes()).has_frame);
  EXPECT_FALSE(ScanJpegMarkers("").has_frame);
}

}  // namespace
}  // namespace torchfarm::worker
