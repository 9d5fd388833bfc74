// The warm-spare decision (supervisor/workers/spare_policy.h) on plain views: who swaps with whom.
#include "supervisor/workers/spare_policy.h"

#include <gtest/gtest.h>

namespace torchfarm {
namespace {

SpareSlotView Slot(SlotState state, std::string group = "cpu") {
  SpareSlotView v;
  v.state = state;
  v.group = std::move(group);
  return v;
}

TEST(SparePolicy, ADeadServingWorkerGetsTheReadySpare) {
  auto plan = PlanSparePromotions({Slot(SlotState::kReady), Slot(SlotState::kBackoff)},
                                  {Slot(SlotState::kReady)});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].serving, 1u);
  EXPECT_EQ(plan[0].spare, 0u);
}

TEST(SparePolicy, FailedAndRestartingWorkersAreReplacedButNotFirstStarts) {
  SpareSlotView first = Slot(SlotState::kStarting);
  first.first_start = true;
  auto plan = PlanSparePromotions(
      {first, Slot(SlotState::kFailed), Slot(SlotState::kStarting)},
      {Slot(SlotState::kReady), Slot(SlotState::kReady), Slot(SlotState::kReady)});
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].serving, 1u);
  EXPECT_EQ(plan[0].spare, 0u);
  EXPECT_EQ(plan[1].serving, 2u);
  EXPECT_EQ(plan[1].spare, 1u);
}

TEST(SparePolicy, OnlyReadySparesOfTheSameGroupStandIn) {
  auto plan = PlanSparePromotions(
      {Slot(SlotState::kBackoff, "cuda:0")},
      {Slot(SlotState::kStarting, "cuda:0"), Slot(SlotState::kReady, "cpu"),
       Slot(SlotState::kBackoff, "cuda:0")});
  EXPECT_TRUE(plan.empty());
  plan = PlanSparePromotions({Slot(SlotState::kBackoff, "cuda:0")},
                             {Slot(SlotState::kReady, "cpu"), Slot(SlotState::kReady, "cuda:0")});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].spare, 1u);
}

TEST(SparePolicy, EachSpareIsPromotedOnceAndWindingDownSlotsAreLeftAlone) {
  SpareSlotView retiring = Slot(SlotState::kBackoff);
  retiring.retiring = true;
  SpareSlotView restarting = Slot(SlotState::kStarting);
  restarting.restart_requested = true;
  SpareSlotView retiring_spare = Slot(SlotState::kReady);
  retiring_spare.retiring = true;
  auto plan = PlanSparePromotions(
      {retiring, restarting, Slot(SlotState::kBackoff), Slot(SlotState::kBackoff)},
      {retiring_spare, Slot(SlotState::kReady)});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].serving, 2u);
  EXPECT_EQ(plan[0].spare, 1u);
}

TEST(SparePolicy, ReadyAndDrainingServingWorkersKeepTheirPlace) {
  EXPECT_TRUE(PlanSparePromotions({Slot(SlotState::kReady), Slot(SlotState::kDraining),
                                   Slot(SlotState::kStopping)},
                                  {Slot(SlotState::kReady)})
                  .empty());
}

TEST(SparePolicy, GroupsAndExpansionFollowTheConfig) {
  InstanceConfig cpu;
  cpu.spares = 2;
  InstanceConfig gpu;
  gpu.device = "cuda:0";
  gpu.spares = 1;
  InstanceConfig none;
  ModelConfig model;
  model.instances = {cpu, none, gpu};
  auto spares = ExpandSpares(model);
  ASSERT_EQ(spares.size(), 3u);
  EXPECT_EQ(spares[0].device, "cpu");
  EXPECT_EQ(spares[2].device, "cuda:0");
  EXPECT_NE(InstanceGroupKey(cpu), InstanceGroupKey(gpu));
  InstanceConfig pinned = cpu;
  pinned.cores = {1};
  EXPECT_NE(InstanceGroupKey(cpu), InstanceGroupKey(pinned));
  InstanceConfig more = cpu;
  more.count = 7;  // count and spares are not what a worker runs with
  more.spares = 0;
  EXPECT_EQ(InstanceGroupKey(cpu), InstanceGroupKey(more));
}

}  // namespace
}  // namespace torchfarm
