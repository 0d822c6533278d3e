//===- PlanTextTest.cpp - The plan as text --------------------------------===//

#include "meshfold/Support/PlanText.h"

#include "gtest/gtest.h"

using namespace meshfold;

namespace {
const char *kSeedText = "devices=32 gpus_per_node=8 nvlink_gbps=4.500000e+02 "
                        "ib_gbps=5.000000e+01 attention=tp:2,cp:2,dp:4,pp:2 "
                        "experts=ep:16:tp+cp+dp,pp:2:pp";
} // namespace

// The text the compiler embeds for the seed plan, field by field.
TEST(PlanText, SeedPlan) {
  PlanSpec spec;
  spec.devices = 32;
  spec.gpusPerNode = 8;
  spec.attention = {{"tp", 2}, {"cp", 2}, {"dp", 4}, {"pp", 2}};
  spec.experts = {{"ep", 16, {"tp", "cp", "dp"}}, {"pp", 2, {"pp"}}};
  EXPECT_EQ(formatPlanText(spec), kSeedText);
}

// What is written is read back as it was.
TEST(PlanText, RoundTrip) {
  PlanSpec spec;
  std::string error;
  ASSERT_TRUE(parsePlanText(kSeedText, spec, &error)) << error;
  EXPECT_EQ(formatPlanText(spec), kSeedText);
  spec.nvlinkGBps = 900;
  spec.ibGBps = 25;
  PlanSpec back;
  ASSERT_TRUE(parsePlanText(formatPlanText(spec), back, &error)) << error;
  EXPECT_EQ(back.nvlinkGBps, 900);
  EXPECT_EQ(back.ibGBps, 25);
  EXPECT_EQ(formatPlanText(back), formatPlanText(spec));
  ASSERT_TRUE(layoutFromPlanText(formatPlanText(back), &error)) << error;
}
