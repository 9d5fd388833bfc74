// Content-Encoding decoding (content_encoding.h) with zlib's inflate, one 64 KiB chunk at a time:
// the output grows only by what inflate produced and is checked against the bound before each
// append, so memory follows the bound, never the stream's claims.
#include "supervisor/frontend/content_encoding.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>

namespace torchfarm {
namespace {

constexpr size_t kChunkBytes = 64 << 10;
constexpr int kZlibWindowBits = 15;       // RFC 1950 (zlib) framing
constexpr int kGzipWindowBits = 16 + 15;  // RFC 1952 (gzip) framing

std::string Lower(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The coding as the client wrote it, shortened for a message.
std::string Shown(std::string_view coding) {
  std::string out(coding.substr(0, 64));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  }
  return "'" + out + (coding.size() > 64 ? "...'" : "'");
}

DecodedBody Refuse(int http_status, Status status) {
  return DecodedBody{std::move(status), http_status};
}

// One z_stream for inflate, ended whatever path leaves.
class Inflater {
 public:
  explicit Inflater(int window_bits) { ok_ = inflateInit2(&stream_, window_bits) == Z_OK; }
  ~Inflater() {
    if (ok_) inflateEnd(&stream_);
  }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  bool ok() const { return ok_; }
  z_stream& stream() { return stream_; }

 private:
  z_stream stream_{};
  bool ok_ = false;
};

// Inflates all of `body` (gzip: member after member) into *out, at most max_bytes.
DecodedBody Inflate(const std::string& coding, std::string_view body, int window_bits,
                    uint64_t max_bytes, std::string* out) {
  Inflater inflater(window_bits);
  if (!inflater.ok()) return Refuse(500, Internal("zlib: inflateInit2 failed"));
  z_stream& z = inflater.stream();
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  size_t left = body.size();
  std::array<char, kChunkBytes> chunk;
  int result = Z_OK;
  while (true) {
    const uInt feed = static_cast<uInt>(std::min<size_t>(left, UINT_MAX));
    z.avail_in = feed;
    z.next_out = reinterpret_cast<Bytef*>(chunk.data());
    z.avail_out = static_cast<uInt>(chunk.size());
    result = inflate(&z, Z_NO_FLUSH);
    left -= feed - z.avail_in;
    const size_t produced = chunk.size() - z.avail_out;
    if (out->size() + produced > max_bytes) {
      return Refuse(413, ResourceExhausted("the " + coding +
                                           " request body inflates past "
                                           "frontend.max_body_bytes (" +
                                           std::to_string(max_bytes) + " bytes)"));
    }
    out->append(chunk.data(), produced);
    if (result == Z_STREAM_END) {
      // gzip allows members one after another; anything else after the end is garbage.
      if (left == 0) return DecodedBody{};
      if (window_bits != kGzipWindowBits) break;
      if (inflateReset(&z) != Z_OK) break;
      continue;
    }
    if (result != Z_OK) break;
    if (left == 0 && produced == 0) break;  // all input read, no end of stream: truncated
  }
  if (result == Z_STREAM_END) {
    return Refuse(400,
                  InvalidArgument("the " + coding + " request body has " + std::to_string(left) +
                                  " bytes after the end of its compressed stream"));
  }
  if (result == Z_OK || result == Z_BUF_ERROR) {
    return Refuse(400, InvalidArgument("the " + coding +
                                       " request body ends before its "
                                       "compressed stream does (truncated after " +
                                       std::to_string(body.size()) + " bytes)"));
  }
  const std::string why =
      z.msg != nullptr ? std::string(z.msg) : "zlib error " + std::to_string(result);
  return Refuse(400, InvalidArgument("the " + coding + " request body is not a valid " + coding +
                                     " stream: " + why));
}

}  // namespace

bool NeedsContentDecoding(std::string_view content_encoding) {
  const std::string coding = Lower(content_encoding);
  return !coding.empty() && coding != "identity";
}

DecodedBody DecodeContentEncoding(std::string_view content_encoding, std::string_view body,
                                  uint64_t max_bytes, std::string* out) {
  out->clear();
  const std::string coding = Lower(content_encoding);
  if (coding.empty() || coding == "identity") {
    if (body.size() > max_bytes) {
      return Refuse(413, ResourceExhausted("the request body exceeds frontend.max_body_bytes (" +
                                           std::to_string(max_bytes) + " bytes)"));
    }
    out->assign(body);
    return DecodedBody{};
  }
  if (coding == "gzip" || coding == "x-gzip") {
    return Inflate("gzip", body, kGzipWindowBits, max_bytes, out);
  }
  if (coding == "deflate") return Inflate("deflate", body, kZlibWindowBits, max_bytes, out);
  return Refuse(415, InvalidArgument("Content-Encoding " + Shown(content_encoding) +
                                     " is not supported; expected one of gzip, deflate, "
                                     "identity"));
}

}  // namespace torchfarm
