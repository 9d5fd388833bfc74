// ParseJob with RequestLimits: frame count and request bytes are refused with the request's id
// and an error naming the limit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "supervisor/intake/job_intake.h"
#include "tests/supervisor/intake/job_intake_fixture.h"

namespace torchfarm {
namespace {

using ::testing::HasSubstr;

class JobIntakeLimitsTest : public ::testing::Test {
 protected:
  JobIntakeLimitsTest() {
    ModelConfig m;
    m.name = "m";
    m.inputs = {TensorSpec{DType::kFloat32, {-1, 4}}};
    m.slot_bytes = 1 << 20;
    models_ = {m};
  }

  Status Run(const std::string& header, const std::vector<size_t>& data_sizes,
             const RequestLimits& limits, PendingRequest* request) {
    return RunJob(models_, header, data_sizes, request, nullptr, JobContext{limits});
  }

  std::vector<ModelConfig> models_;
};

const char* kOneRow =
    R"({"v":1,"id":"r1","model":"m","inputs":[{"dtype":"float32","shape":[1,4]}]})";

TEST_F(JobIntakeLimitsTest, TooManyFrames) {
  RequestLimits limits;
  limits.max_inputs = 2;
  PendingRequest r;
  Status s = Run(kOneRow, {16, 16, 16}, limits, &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("more than 3 frames after the envelope"));
  EXPECT_THAT(s.message(), HasSubstr("limits.max_frames"));
  EXPECT_EQ(r.id, "r1") << "the refusal echoes the id so the client can match it";
}

TEST_F(JobIntakeLimitsTest, RequestBytes) {
  RequestLimits limits;
  limits.max_request_bytes = 50;
  PendingRequest r;
  Status s = Run(kOneRow, {16}, limits, &r);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("exceeds the limit of 50 (limits.max_request_bytes)"));
  EXPECT_EQ(r.id, "r1");
  limits.max_request_bytes = 1000;
  PendingRequest ok;
  EXPECT_TRUE(Run(kOneRow, {16}, limits, &ok).ok());
}

TEST_F(JobIntakeLimitsTest, TensorBytesAndHeaderBytes) {
  RequestLimits limits;
  limits.max_tensor_bytes = 8;
  PendingRequest r;
  Status s = Run(kOneRow, {16}, limits, &r);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("limits.max_tensor_bytes"));
  limits = RequestLimits{};
  limits.max_header_bytes = 20;
  PendingRequest r2;
  s = Run(kOneRow, {16}, limits, &r2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("exceeds the limit of 20"));
}

}  // namespace
}  // namespace torchfarm
