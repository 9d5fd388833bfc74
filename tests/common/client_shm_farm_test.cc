// The C++ client's shared memory end to end: a real supervisor and worker (farm_fixture.h) serve
// the identity model; inputs and outputs go through a region the supervisor created, and the
// region's name is gone once released.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "farm_fixture.h"
#include "torchfarm/client.h"

namespace torchfarm::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Identity() {
  return json::array({{{"name", "identity"},
                       {"path", ModelDir() + "/identity.pt"},
                       {"inputs", {{{"dtype", "float32"}, {"shape", {-1, 256}}}}},
                       {"instances", {{{"device", "cpu"}, {"count", 1}}}}}});
}

std::vector<float> Rows(int rows, float first) {
  std::vector<float> values(static_cast<size_t>(rows) * 256);
  for (size_t i = 0; i < values.size(); ++i) values[i] = first + static_cast<float>(i);
  return values;
}

TEST(ClientShmFarm, IdentityThroughARegionTheSupervisorMade) {
  Farm farm(Identity());
  ASSERT_TRUE(farm.Start());
  ASSERT_TRUE(farm.WaitReady()) << farm.error();
  Client client(farm.endpoint(), 20000);
  std::unique_ptr<ShmRegion> region;
  Status s = client.CreateShm(1 << 20, &region);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(region->size(), 1u << 20);
  EXPECT_EQ(::access(("/dev/shm" + region->name()).c_str(), F_OK), 0);

  // Input and output both in the region.
  std::vector<float> x = Rows(2, 0.5f);
  const TensorSpec spec{DType::kFloat32, {2, 256}};
  TensorView input;
  ASSERT_TRUE(region->Write(TensorView(spec, x.data(), x.size() * 4), 4096, &input).ok());
  InferOptions options;
  ASSERT_TRUE(region->Output(65536, 65536, &options.output_shm).ok());
  InferResult result;
  s = client.Infer("identity", {input}, &result, options);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(result.outputs.empty());
  ASSERT_EQ(result.header.outputs.size(), 1u);
  EXPECT_EQ(result.header.outputs[0], spec);
  ASSERT_EQ(result.header.output_shm.size(), 1u);
  EXPECT_EQ(result.header.output_shm[0].region, region->token());
  EXPECT_EQ(result.header.output_shm[0].offset, 65536u);
  EXPECT_EQ(std::memcmp(region->data() + 65536, x.data(), x.size() * 4), 0);

  // An input in the region, the output as a data frame.
  std::vector<float> y = Rows(1, -3.0f);
  ASSERT_TRUE(
      region->Write(TensorView({DType::kFloat32, {1, 256}}, y.data(), 1024), 0, &input).ok());
  s = client.Infer("identity", {input}, &result);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(result.outputs.size(), 1u);
  EXPECT_EQ(std::memcmp(result.outputs[0].data.data(), y.data(), 1024), 0);

  // The supervisor's checks come back with its words.
  TensorView past_end;
  ASSERT_TRUE(region->Input({DType::kFloat32, {1, 256}}, 0, &past_end).ok());
  past_end.shm.offset = (1 << 20) - 512;
  s = client.Infer("identity", {past_end}, &result);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("inputs[0].shm"));

  const std::string name = region->name();
  EXPECT_TRUE(region->Release().ok());
  EXPECT_NE(::access(("/dev/shm" + name).c_str(), F_OK), 0) << "unlinked on release";
  s = client.Infer("identity", {input}, &result);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("inputs[0].shm.region"));
  EXPECT_EQ(std::memcmp(region->data() + 65536, x.data(), x.size() * 4), 0)
      << "the mapping outlives the release";
  EXPECT_EQ(farm.Stop(), 0);
}

}  // namespace
}  // namespace torchfarm::testing
