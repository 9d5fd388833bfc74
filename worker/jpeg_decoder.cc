#include "worker/jpeg_decoder.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

namespace torchfarm::worker {
namespace {

// Markers (ITU T.81, table B.1) the scan before libturbojpeg needs.
constexpr uint8_t kSoi = 0xd8, kEoi = 0xd9, kSos = 0xda, kTem = 0x01, kRst0 = 0xd0, kRst7 = 0xd7;
constexpr uint8_t kApp14 = 0xee;
// An Adobe APP14 segment's data is at least 12 bytes ("Adobe", version, flags, transform), the
// length libjpeg requires before it believes one.
constexpr size_t kAdobeSegmentBytes = 12;
// A frame header's data: precision, height, width, component count (then the components).
constexpr size_t kFrameHeaderBytes = 6;

// Warnings stop the decode (they fail it anyway, and a corrupt item costs less), and a
// progressive JPEG of hundreds of scans is refused instead of decoded for seconds (libjpeg-turbo's
// limit, 500).
constexpr int kDecompressFlags = TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS;

struct HandleDeleter {
  void operator()(void* handle) const {
    if (handle) tjDestroy(handle);
  }
};
using TurboHandle = std::unique_ptr<void, HandleDeleter>;

// This thread's decompressor, lent to one decode. Unless the decode ends in Succeeded(), the
// handle is destroyed on the way out (a failed call, a refused size, an exception from the
// destination): libturbojpeg 2.1 leaves a failed tjDecompressHeader3 mid-header and a failed
// tjDecompress2's warning flag set, and either fails every later call on the same handle.
class DecompressorLease {
 public:
  DecompressorLease() {
    if (!Slot()) Slot().reset(tjInitDecompress());
  }
  ~DecompressorLease() {
    if (!succeeded_) Slot().reset();
  }
  DecompressorLease(const DecompressorLease&) = delete;
  DecompressorLease& operator=(const DecompressorLease&) = delete;

  tjhandle get() const { return Slot().get(); }
  void Succeeded() { succeeded_ = true; }

 private:
  static TurboHandle& Slot() {
    thread_local TurboHandle handle;
    return handle;
  }
  bool succeeded_ = false;
};

// "89 50 4e 47 (1234 bytes)": what arrived instead of a JPEG.
std::string FirstBytes(std::string_view data) {
  if (data.empty()) return "0 bytes";
  std::string out;
  for (size_t i = 0; i < std::min<size_t>(data.size(), 4); ++i) {
    char hex[4];
    std::snprintf(hex, sizeof(hex), "%02x", static_cast<uint8_t>(data[i]));
    out += (i == 0 ? "" : " ") + std::string(hex);
  }
  return out + " (" + std::to_string(data.size()) + " bytes)";
}

Status CheckPixels(int width, int height, uint64_t max_pixels) {
  const uint64_t pixels = static_cast<uint64_t>(width) * static_cast<uint64_t>(height);
  if (pixels <= max_pixels) return Status::Ok();
  return InvalidArgument("JPEG of " + std::to_string(width) + "x" + std::to_string(height) + " = " +
                         std::to_string(pixels) + " pixels; at most " + std::to_string(max_pixels) +
                         " (decode.max_pixels)");
}

bool IsFrameHeader(uint8_t marker) {
  // SOF0..SOF15 but DHT (c4), JPG (c8) and DAC (cc), which share the range.
  return marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc;
}

void ReadSegment(uint8_t marker, const uint8_t* data, size_t length, JpegMarkers* out) {
  if (IsFrameHeader(marker) && !out->has_frame && length >= kFrameHeaderBytes) {
    out->has_frame = true;
    out->height = (data[1] << 8) | data[2];
    out->width = (data[3] << 8) | data[4];
    out->components = data[5];
  } else if (marker == kApp14 && length >= kAdobeSegmentBytes &&
             std::memcmp(data, "Adobe", 5) == 0) {
    out->adobe = true;
  }
}

// Naive CMYK -> RGB: 255 - ink is how much of the white paper shows through; Adobe files store
// exactly that (inverted CMYK), others the ink itself.
void CmykToRgb(const uint8_t* cmyk, size_t pixels, bool adobe, uint8_t* rgb) {
  const unsigned flip = adobe ? 0 : 255;  // x ^ 255 == 255 - x for a byte
  for (size_t i = 0; i < pixels; ++i, cmyk += 4, rgb += 3) {
    const unsigned white_k = cmyk[3] ^ flip;
    for (int c = 0; c < 3; ++c) {
      rgb[c] = static_cast<uint8_t>(((cmyk[c] ^ flip) * white_k + 127) / 255);
    }
  }
}

Status Decompress(tjhandle handle, std::string_view jpeg, int width, int height, int pixel_format,
                  uint8_t* out) {
  if (tjDecompress2(handle, reinterpret_cast<const unsigned char*>(jpeg.data()),
                    static_cast<unsigned long>(jpeg.size()), out, width, 0, height, pixel_format,
                    kDecompressFlags) == 0) {
    return Status::Ok();
  }
  const bool warning = tjGetErrorCode(handle) == TJERR_WARNING;
  return InvalidArgument(std::string(warning ? "truncated or corrupt JPEG: " : "corrupt JPEG: ") +
                         tjGetErrorStr2(handle));
}

Status DecompressCmyk(tjhandle handle, std::string_view jpeg, int width, int height, bool adobe,
                      uint8_t* rgb) {
  const size_t pixels = static_cast<size_t>(width) * static_cast<size_t>(height);
  std::vector<uint8_t> cmyk(pixels * 4);
  Status status = Decompress(handle, jpeg, width, height, TJPF_CMYK, cmyk.data());
  if (status.ok()) CmykToRgb(cmyk.data(), pixels, adobe, rgb);
  return status;
}

}  // namespace

JpegMarkers ScanJpegMarkers(std::string_view jpeg) {
  JpegMarkers out;
  const auto* p = reinterpret_cast<const uint8_t*>(jpeg.data());
  const size_t size = jpeg.size();
  if (size < 2 || p[0] != 0xff || p[1] != kSoi) return out;
  size_t pos = 2;
  while (pos + 2 <= size && p[pos] == 0xff) {
    const uint8_t marker = p[pos + 1];
    if (marker == 0xff) {  // a fill byte before the marker
      ++pos;
      continue;
    }
    pos += 2;
    if (marker == kTem || (marker >= kRst0 && marker <= kRst7)) continue;  // no segment
    if (marker == kSos || marker == kEoi || marker == kSoi || pos + 2 > size) break;
    const size_t length = (static_cast<size_t>(p[pos]) << 8) | p[pos + 1];  // counts itself
    if (length < 2 || length > size - pos) break;
    ReadSegment(marker, p + pos + 2, length - 2, &out);
    pos += length;
  }
  return out;
}

Status DecodeJpegRgb(std::string_view jpeg, uint64_t max_pixels, const RgbDestination& destination,
                     int* width, int* height) {
  *width = *height = 0;
  if (jpeg.size() < 2 || static_cast<uint8_t>(jpeg[0]) != 0xff ||
      static_cast<uint8_t>(jpeg[1]) != kSoi) {
    return InvalidArgument("not a JPEG: expected ff d8 first, got " + FirstBytes(jpeg));
  }
  // The frame's size first: a small file can declare a huge picture.
  const JpegMarkers markers = ScanJpegMarkers(jpeg);
  if (markers.has_frame) {
    if (Status s = CheckPixels(markers.width, markers.height, max_pixels); !s.ok()) return s;
  }
  DecompressorLease decompressor;
  tjhandle handle = decompressor.get();
  if (!handle) {
    return Internal(std::string("cannot create a JPEG decompressor: ") + tjGetErrorStr2(nullptr));
  }
  int w = 0, h = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(handle, reinterpret_cast<const unsigned char*>(jpeg.data()),
                          static_cast<unsigned long>(jpeg.size()), &w, &h, &subsampling,
                          &colorspace) != 0) {
    return InvalidArgument(std::string("corrupt JPEG header: ") + tjGetErrorStr2(handle));
  }
  if (w <= 0 || h <= 0) {  // libturbojpeg accepts a stream of tables alone
    return InvalidArgument(
        w == 0 && h == 0 ? "corrupt JPEG header: expected a frame header (SOFn), got none in " +
                               std::to_string(jpeg.size()) + " bytes"
                         : "corrupt JPEG header: expected a frame of at least 1x1, got " +
                               std::to_string(w) + "x" + std::to_string(h));
  }
  if (Status s = CheckPixels(w, h, max_pixels); !s.ok()) return s;
  uint8_t* rgb = destination(w, h);
  if (!rgb) {
    return ResourceExhausted("cannot allocate " + std::to_string(w) + "x" + std::to_string(h) +
                             " RGB pixels");
  }
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  Status status = cmyk ? DecompressCmyk(handle, jpeg, w, h, markers.adobe, rgb)
                       : Decompress(handle, jpeg, w, h, TJPF_RGB, rgb);
  if (!status.ok()) return status;
  decompressor.Succeeded();
  *width = w;
  *height = h;
  return Status::Ok();
}

Status DecodeJpegRgb(std::string_view jpeg, uint64_t max_pixels, std::vector<uint8_t>* rgb,
                     int* width, int* height) {
  Status status = DecodeJpegRgb(
      jpeg, max_pixels,
      [rgb](int w, int h) {
        rgb->resize(static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
        return rgb->data();
      },
      width, height);
  if (!status.ok()) rgb->clear();
  return status;
}

}  // namespace torchfarm::worker
