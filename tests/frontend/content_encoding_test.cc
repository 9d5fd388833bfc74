// Content-Encoding decoding (issue 30 item 3): gzip and deflate as zlib and tritonclient write
// them, and hostile streams: bombs, lying trailers, truncation, garbage, unknown codings. Each
// bad one is followed by a good one.
#include "supervisor/frontend/content_encoding.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

namespace torchfarm {
namespace {

// `text` compressed by zlib: gzip framing (window_bits 31) or zlib framing (15).
std::string Compress(const std::string& text, int window_bits) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, window_bits, 9, Z_DEFAULT_STRATEGY),
            Z_OK);
  std::string out(deflateBound(&z, text.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}
std::string Gzip(const std::string& text) { return Compress(text, 31); }
std::string Deflate(const std::string& text) { return Compress(text, 15); }

const std::string kGood = R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]})";

void ExpectGoodStillDecodes() {
  std::string out;
  EXPECT_TRUE(DecodeContentEncoding("gzip", Gzip(kGood), 1 << 20, &out).status.ok());
  EXPECT_EQ(out, kGood);
}

TEST(ContentEncodingTest, GzipDeflateAndIdentityDecodeToTheSameBytes) {
  for (const auto& [coding, body] : {std::pair<std::string, std::string>{"gzip", Gzip(kGood)},
                                     {"x-gzip", Gzip(kGood)},
                                     {" GZip ", Gzip(kGood)},
                                     {"deflate", Deflate(kGood)},
                                     {"identity", kGood},
                                     {"", kGood}}) {
    std::string out;
    const DecodedBody result = DecodeContentEncoding(coding, body, 1 << 20, &out);
    ASSERT_TRUE(result.status.ok()) << coding << ": " << result.status.ToString();
    EXPECT_EQ(out, kGood) << coding;
  }
  EXPECT_TRUE(NeedsContentDecoding("gzip"));
  EXPECT_TRUE(NeedsContentDecoding("br"));
  EXPECT_FALSE(NeedsContentDecoding(""));
  EXPECT_FALSE(NeedsContentDecoding(" Identity"));
}

TEST(ContentEncodingTest, ConcatenatedGzipMembersAreReadInTurn) {
  std::string out;
  const DecodedBody result =
      DecodeContentEncoding("gzip", Gzip("abc") + Gzip("def"), 1 << 20, &out);
  ASSERT_TRUE(result.status.ok()) << result.status.ToString();
  EXPECT_EQ(out, "abcdef");
}

// 1 GiB of zeros compresses to ~1 MiB; with a 1 MiB bound it is refused after about 1 MiB of
// output, never allocated whole.
TEST(ContentEncodingTest, AZipBombIsRefused413AtTheBound) {
  const std::string bomb = Gzip(std::string(size_t{64} << 20, '\0'));
  ASSERT_LT(bomb.size(), 100u << 10);
  std::string out;
  const DecodedBody result = DecodeContentEncoding("gzip", bomb, 1 << 20, &out);
  EXPECT_EQ(result.http_status, 413);
  EXPECT_EQ(result.status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(result.status.message(),
            "the gzip request body inflates past frontend.max_body_bytes (1048576 bytes)");
  EXPECT_LE(out.size(), 1u << 20);
  const DecodedBody deflated =
      DecodeContentEncoding("deflate", Deflate(std::string(8 << 20, 'a')), 1 << 20, &out);
  EXPECT_EQ(deflated.http_status, 413);
  // Exactly at the bound fits.
  EXPECT_TRUE(
      DecodeContentEncoding("gzip", Gzip(std::string(1 << 20, 'b')), 1 << 20, &out).status.ok());
  EXPECT_EQ(out.size(), 1u << 20);
  ExpectGoodStillDecodes();
}

TEST(ContentEncodingTest, LyingTrailersTruncationAndGarbageAre400) {
  std::string out;
  std::string lying = Gzip(kGood);
  lying[lying.size() - 1] ^= 0x01;  // ISIZE: the length it claims
  DecodedBody result = DecodeContentEncoding("gzip", lying, 1 << 20, &out);
  EXPECT_EQ(result.http_status, 400);
  EXPECT_NE(result.status.message().find("not a valid gzip stream: incorrect length check"),
            std::string::npos)
      << result.status.message();
  std::string bad_crc = Gzip(kGood);
  bad_crc[bad_crc.size() - 5] ^= 0x01;
  result = DecodeContentEncoding("gzip", bad_crc, 1 << 20, &out);
  EXPECT_NE(result.status.message().find("incorrect data check"), std::string::npos);

  const std::string whole = Gzip(kGood);
  result = DecodeContentEncoding("gzip", whole.substr(0, whole.size() / 2), 1 << 20, &out);
  EXPECT_EQ(result.http_status, 400);
  EXPECT_NE(result.status.message().find("ends before its compressed stream does"),
            std::string::npos)
      << result.status.message();

  result = DecodeContentEncoding("deflate", Deflate(kGood) + "junk", 1 << 20, &out);
  EXPECT_EQ(result.http_status, 400);
  EXPECT_EQ(result.status.message(),
            "the deflate request body has 4 bytes after the end of its compressed stream");

  result = DecodeContentEncoding("gzip", kGood, 1 << 20, &out);  // not compressed at all
  EXPECT_EQ(result.http_status, 400);
  EXPECT_NE(result.status.message().find("not a valid gzip stream"), std::string::npos);
  result = DecodeContentEncoding("deflate", Gzip(kGood), 1 << 20, &out);  // the wrong framing
  EXPECT_EQ(result.http_status, 400);
  ExpectGoodStillDecodes();
}

TEST(ContentEncodingTest, UnknownCodingsAre415NamingThem) {
  std::string out;
  DecodedBody result = DecodeContentEncoding("br", "x", 1 << 20, &out);
  EXPECT_EQ(result.http_status, 415);
  EXPECT_EQ(result.status.message(),
            "Content-Encoding 'br' is not supported; expected one of gzip, deflate, identity");
  result = DecodeContentEncoding("gzip, deflate", "x", 1 << 20, &out);
  EXPECT_EQ(result.http_status, 415);
  result = DecodeContentEncoding(std::string(200, '\x01'), "x", 1 << 20, &out);
  EXPECT_EQ(result.http_status, 415);
  EXPECT_LT(result.status.message().size(), 160u);
  ExpectGoodStillDecodes();
}

TEST(ContentEncodingTest, AnIdentityBodyOverTheBoundIs413) {
  std::string out;
  EXPECT_EQ(DecodeContentEncoding("identity", std::string(11, 'x'), 10, &out).http_status, 413);
}

}  // namespace
}  // namespace torchfarm
