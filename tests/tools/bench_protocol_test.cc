// The load generator's lean protocol view for `torchfarm bench --shm`: the shared-memory request
// template is a header the supervisor accepts, and reply checks accept outputs only inside the
// request's output range.
#include "tools/bench_protocol.h"

#include <gtest/gtest.h>

#include "common/protocol.h"

namespace torchfarm {
namespace {

const std::vector<TensorSpec> kInputs = {{DType::kFloat32, {1, 256}}, {DType::kInt64, {3}}};
const std::string kRegion = "0123456789abcdef0123456789abcdef";

TEST(BenchProtocolShm, TemplatePutsEveryInputInTheRegion) {
  ShmPlacement placement{{4096, 5120}, ShmRef{kRegion, 8192, 2048}};
  const std::string text = RequestTemplate("identity", kInputs, placement).Build(42);
  RequestHeader header;
  Status s = ParseRequestHeader(text, &header);
  ASSERT_TRUE(s.ok()) << s.ToString() << " in " << text;
  EXPECT_EQ(header.id, 42);
  EXPECT_EQ(header.inputs, kInputs);
  ASSERT_EQ(header.input_shm.size(), 2u);
  EXPECT_EQ(header.input_shm[0].region, kRegion);
  EXPECT_EQ(header.input_shm[1].offset, 5120u);
  EXPECT_EQ(header.output_shm.offset, 8192u);
  EXPECT_EQ(header.output_shm.bytes, 2048u);
  EXPECT_TRUE(CheckInputFrames(header, {}).ok()) << "no data frames";
  char buffer[1024];
  const size_t length = RequestTemplate("identity", kInputs, placement).BuildInto(42, buffer, 1024);
  EXPECT_EQ(std::string(buffer, length), text);
  // Without a placement the template is the data-frames one.
  EXPECT_EQ(RequestTemplate("identity", kInputs).Build(1).find("shm"), std::string::npos);
}

// `torchfarm bench --timeout-ms` and `--client-deadline` reach the header (--timeout-ms was parsed
// and never sent before): both fields read back as sent, by the supervisor's own parser, from
// Build and BuildInto alike; none of them leaves the header as it was.
TEST(BenchProtocol, ATemplateCarriesTheTimeoutAndTheClientDeadline) {
  const RequestTemplate request("mlp", kInputs);
  RequestExtras extras;
  extras.timeout_ms = 250;
  extras.deadline_unix_us = INT64_MAX;
  const std::string text = request.Build(UINT64_MAX, extras);
  RequestHeader header;
  Status s = ParseRequestHeader(text, &header);
  ASSERT_TRUE(s.ok()) << s.ToString() << " in " << text;
  EXPECT_EQ(header.id, UINT64_MAX);
  EXPECT_EQ(header.timeout_ms, 250);
  EXPECT_EQ(header.deadline_unix_us, INT64_MAX);
  EXPECT_EQ(header.inputs, kInputs);
  char buffer[1024];
  EXPECT_EQ(std::string(buffer, request.BuildInto(UINT64_MAX, buffer, sizeof(buffer), extras)),
            text);
  EXPECT_EQ(request.BuildInto(1, buffer, 40, extras), 0u) << "too small: the caller builds it";
  extras.timeout_ms = 0;
  ASSERT_TRUE(ParseRequestHeader(request.Build(7, extras), &header).ok());
  EXPECT_EQ(header.timeout_ms, 0);
  EXPECT_EQ(header.deadline_unix_us, INT64_MAX);
  EXPECT_EQ(request.Build(7), request.Build(7, RequestExtras{}));
  EXPECT_EQ(request.Build(7).find("deadline"), std::string::npos);
}

TEST(BenchProtocolShm, RepliesMustPlaceOutputsInTheRange) {
  const ShmRef range{kRegion, 8192, 2048};
  std::vector<uint64_t> offsets;
  ASSERT_TRUE(PlaceOutputs(kInputs, range, &offsets).ok());
  uint64_t bytes = 0;
  const std::string ok = MakeOkReply(7, kInputs, {}, 0, kRegion, &offsets);
  EXPECT_TRUE(ShmOutputsInRange(ok, range, &bytes));
  EXPECT_EQ(bytes, 1024u + 24u);
  std::vector<uint64_t> past_end = {8192, 8192 + 2048 - 8};
  EXPECT_FALSE(
      ShmOutputsInRange(MakeOkReply(7, kInputs, {}, 0, kRegion, &past_end), range, &bytes));
  EXPECT_FALSE(ShmOutputsInRange(MakeOkReply(7, kInputs, {}, 0, "other", &offsets), range, &bytes));
  EXPECT_FALSE(ShmOutputsInRange(MakeOkReply(7, kInputs, {}, 0), range, &bytes)) << "frames";
  EXPECT_FALSE(ShmOutputsInRange(MakeErrorReply(7, Internal("x")), range, &bytes));
}

}  // namespace
}  // namespace torchfarm
