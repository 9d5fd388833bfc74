// Client identity of v2 requests as pure functions: a frontend.client_id_header value that may
// name a client (v2_client_id.h), hostile values first, and the tag that carries the key to the
// loop, written by the front ends and read back by the loop (frontend_tag.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "supervisor/frontend/frontend_tag.h"
#include "supervisor/frontend/v2_client_id.h"

namespace torchfarm {
namespace {

std::string Check(std::string_view value) {
  Status s = CheckClientId("x-tenant", value);
  if (s.ok()) return "OK";
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  return s.message();
}

constexpr const char* kExpected =
    "x-tenant: expected 1..255 visible ASCII characters naming the client "
    "(frontend.client_id_header), got ";

TEST(ClientIdTest, HostileValuesAreRefusedNamingTheHeaderTheLimitAndWhatCame) {
  EXPECT_EQ(Check(""), std::string(kExpected) + "an empty value");
  EXPECT_EQ(Check(std::string(256, 'a')), std::string(kExpected) + "256 bytes");
  EXPECT_EQ(Check(std::string(300, 'a')), std::string(kExpected) + "300 bytes");
  EXPECT_EQ(Check(std::string(1 << 20, 'a')), std::string(kExpected) + "1048576 bytes");
  // Control characters, space, DEL, non-ASCII: named by their code and place, never echoed.
  EXPECT_EQ(Check(std::string("gold\0x", 6)),
            std::string(kExpected) + "6 bytes with byte 0x00 at offset 4");
  EXPECT_EQ(Check("\x01gold"), std::string(kExpected) + "5 bytes with byte 0x01 at offset 0");
  EXPECT_EQ(Check("go\tld"), std::string(kExpected) + "5 bytes with byte 0x09 at offset 2");
  EXPECT_EQ(Check("go\r\nld"), std::string(kExpected) + "6 bytes with byte 0x0d at offset 2");
  EXPECT_EQ(Check("tenant gold"), std::string(kExpected) + "11 bytes with byte 0x20 at offset 6");
  EXPECT_EQ(Check("gold\x7f"), std::string(kExpected) + "5 bytes with byte 0x7f at offset 4");
  EXPECT_EQ(Check("t\xc3\xa9nant"), std::string(kExpected) + "7 bytes with byte 0xc3 at offset 1");
  EXPECT_EQ(Check("\xff"), std::string(kExpected) + "1 bytes with byte 0xff at offset 0");
  // The header's name is the configured one.
  EXPECT_EQ(CheckClientId("x-org", "").message(),
            "x-org: expected 1..255 visible ASCII characters naming the client "
            "(frontend.client_id_header), got an empty value");
}

TEST(ClientIdTest, OneTo255VisibleAsciiCharactersNameAClient) {
  EXPECT_EQ(Check("a"), "OK");
  EXPECT_EQ(Check("tenant-gold"), "OK");
  EXPECT_EQ(Check(std::string(255, 'z')), "OK");
  std::string every;
  for (int c = 0x21; c <= 0x7e; ++c) every.push_back(static_cast<char>(c));
  EXPECT_EQ(Check(every), "OK");
  // A CURVE public key (Z85) is such a value, so a v2 client can share a CURVE client's key.
  EXPECT_EQ(Check("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"), "OK");
}

std::string Tag(RequestOrigin origin, std::string_view header,
                const std::vector<std::string_view>& values, Status* status = nullptr) {
  std::string tag = "unset";
  Status s = V2RequestTag(origin, "127.0.0.1:40000", header, values, &tag);
  if (status) *status = s;
  return s.ok() ? tag : "refused: " + s.message();
}

TEST(ClientIdTest, TheRequestTagIsTheIdsWhenTheHeaderIsSetAndSentElseThePeers) {
  // Off: any value the request carries is ignored.
  EXPECT_EQ(Tag(RequestOrigin::kHttp, "", {}), "http 127.0.0.1:40000");
  EXPECT_EQ(Tag(RequestOrigin::kHttp, "", {"gold"}), "http 127.0.0.1:40000");
  // On, not sent: the connection, as without the key.
  EXPECT_EQ(Tag(RequestOrigin::kHttp, "x-tenant", {}), "http 127.0.0.1:40000");
  EXPECT_EQ(Tag(RequestOrigin::kGrpc, "x-tenant", {}), "grpc 127.0.0.1:40000");
  // On and sent.
  EXPECT_EQ(Tag(RequestOrigin::kHttp, "x-tenant", {"tenant-gold"}), "http=tenant-gold");
  EXPECT_EQ(Tag(RequestOrigin::kGrpc, "x-tenant", {"tenant-gold"}), "grpc=tenant-gold");
  // Twice, even with equal values: refused, not guessed.
  Status status;
  EXPECT_EQ(Tag(RequestOrigin::kHttp, "x-tenant", {"gold", "silver"}, &status),
            "refused: x-tenant: expected one value naming the client "
            "(frontend.client_id_header), got 2 values");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tag(RequestOrigin::kGrpc, "x-tenant", {"gold", "gold", "gold"}),
            "refused: x-tenant: expected one value naming the client "
            "(frontend.client_id_header), got 3 values");
  EXPECT_EQ(Tag(RequestOrigin::kGrpc, "x-tenant", {""}),
            "refused: " + std::string(kExpected) + "an empty value");
}

TEST(FrontendTagTest, TheLoopReadsTheProtocolAndTheClientKey) {
  const struct {
    std::string tag;
    RequestOrigin origin;
    std::string client;
  } cases[] = {
      {PeerTag(RequestOrigin::kHttp, "127.0.0.1:40000"), RequestOrigin::kHttp,
       "http 127.0.0.1:40000"},
      {PeerTag(RequestOrigin::kGrpc, "ipv4:127.0.0.1:5"), RequestOrigin::kGrpc,
       "grpc ipv4:127.0.0.1:5"},
      {PeerTag(RequestOrigin::kHttp, "[::1]:8000"), RequestOrigin::kHttp, "http [::1]:8000"},
      {ClientIdTag(RequestOrigin::kHttp, "tenant-gold"), RequestOrigin::kHttp, "tenant-gold"},
      {ClientIdTag(RequestOrigin::kGrpc, "tenant-gold"), RequestOrigin::kGrpc, "tenant-gold"},
      // An id may hold '=' and look like a tag; it is still just the id.
      {ClientIdTag(RequestOrigin::kGrpc, "grpc=x"), RequestOrigin::kGrpc, "grpc=x"},
      // No peer text is read as an id, whatever it holds.
      {PeerTag(RequestOrigin::kHttp, "=gold"), RequestOrigin::kHttp, "http =gold"},
      {PeerTag(RequestOrigin::kGrpc, "unix:/run/a=b"), RequestOrigin::kGrpc, "grpc unix:/run/a=b"},
  };
  for (const auto& c : cases) {
    const FrontendTagParts parts = ReadFrontendTag(c.tag);
    EXPECT_EQ(parts.origin, c.origin) << c.tag;
    EXPECT_EQ(parts.client, c.client) << c.tag;
  }
  EXPECT_EQ(ClientIdTag(RequestOrigin::kHttp, "tenant-gold"), "http=tenant-gold");
}

// Random ids over the documented range (1..255 bytes of 0x21..0x7e) are accepted and come back
// from the loop's side as the exact key; one byte outside it anywhere is refused at its offset.
// The seed is printed on failure.
TEST(ClientIdTest, SeededIdsRoundTripAndOneBadByteIsRefused) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (int round = 0; round < 1000; ++round) {
    std::string id(std::uniform_int_distribution<size_t>(1, kMaxClientIdBytes)(rng), 'x');
    for (char& c : id) c = static_cast<char>(std::uniform_int_distribution<int>(0x21, 0x7e)(rng));
    const RequestOrigin origin = rng() % 2 ? RequestOrigin::kHttp : RequestOrigin::kGrpc;
    std::string tag;
    ASSERT_TRUE(V2RequestTag(origin, "peer", "x-tenant", {id}, &tag).ok()) << "seed " << seed;
    const FrontendTagParts parts = ReadFrontendTag(tag);
    ASSERT_EQ(parts.client, id) << "seed " << seed;
    ASSERT_EQ(parts.origin, origin) << "seed " << seed;
    int bad = std::uniform_int_distribution<int>(0, 0x21 + 0x80)(rng);
    if (bad >= 0x21) bad += 0x7e - 0x21 + 1;  // 0x00..0x20 or 0x7f..0xff
    const size_t at = rng() % id.size();
    id[at] = static_cast<char>(bad);
    char code[8];
    std::snprintf(code, sizeof(code), "0x%02x", bad);
    ASSERT_EQ(Check(id), std::string(kExpected) + std::to_string(id.size()) + " bytes with byte " +
                             code + " at offset " + std::to_string(at))
        << "seed " << seed;
  }
}

}  // namespace
}  // namespace torchfarm
