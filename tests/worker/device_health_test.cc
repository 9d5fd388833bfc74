// Device failure classification and the fault-injection spec.
#include <gtest/gtest.h>

#include "worker/device_health.h"
#include "worker/fault_injection.h"

namespace torchfarm::worker {
namespace {

TEST(DeviceHealth, ClassifiesCudaErrorsByMessage) {
  EXPECT_EQ(ClassifyDeviceError("CUDA out of memory. Tried to allocate 20.00 MiB"),
            DeviceErrorClass::kOutOfMemory);
  EXPECT_EQ(ClassifyDeviceError("CUDA error: an illegal memory access was encountered"),
            DeviceErrorClass::kSticky);
  EXPECT_EQ(ClassifyDeviceError("CUDA error: device-side assert triggered"), DeviceErrorClass::kSticky);
  EXPECT_EQ(ClassifyDeviceError("CUDA error: uncorrectable ECC error encountered"),
            DeviceErrorClass::kSticky);
  EXPECT_EQ(ClassifyDeviceError("CUDA error: invalid configuration argument"),
            DeviceErrorClass::kOtherDevice);
  EXPECT_EQ(ClassifyDeviceError("CUDA error: MPS server is not ready to accept new MPS client "
                                "requests (cudaErrorMpsServerNotReady in cudaSetDevice)"),
            DeviceErrorClass::kSticky);
  EXPECT_EQ(ClassifyDeviceError("mat1 and mat2 shapes cannot be multiplied (1x10 and 256x512)"),
            DeviceErrorClass::kModel);
}

TEST(DeviceHealth, CpuIsAlwaysHealthy) { EXPECT_TRUE(ProbeDevice(c10::Device(c10::kCPU))); }

TEST(FaultPlan, ParsesItemsAndFiresEachOnce) {
  FaultPlan plan;
  ASSERT_TRUE(FaultPlan::Parse("crash@3,oom@1/w2,fakegpu", 2, 0, &plan).ok());
  EXPECT_TRUE(plan.fake_gpu());
  EXPECT_EQ(plan.Take(1), FaultKind::kOutOfMemory);
  EXPECT_EQ(plan.Take(1), FaultKind::kNone) << "fires once";
  EXPECT_EQ(plan.Take(2), FaultKind::kNone);
  EXPECT_EQ(plan.Take(3), FaultKind::kCrash);
}

TEST(FaultPlan, OtherWorkersAndRestartedWorkersRunClean) {
  FaultPlan plan;
  ASSERT_TRUE(FaultPlan::Parse("oom@1/w2", 1, 0, &plan).ok());
  EXPECT_EQ(plan.Take(1), FaultKind::kNone) << "restricted to worker 2";
  ASSERT_TRUE(FaultPlan::Parse("crash@1", 0, 1, &plan).ok());
  EXPECT_EQ(plan.Take(1), FaultKind::kNone) << "generation 1 is a restarted worker";
}

TEST(FaultPlan, RejectsMalformedItemsWithTheItem) {
  FaultPlan plan;
  Status s = FaultPlan::Parse("explode@2", 0, 0, &plan);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("explode@2"), std::string::npos) << s.message();
  EXPECT_FALSE(FaultPlan::Parse("crash@0", 0, 0, &plan).ok());
  EXPECT_FALSE(FaultPlan::Parse("crash", 0, 0, &plan).ok());
}

}  // namespace
}  // namespace torchfarm::worker
