//===- PlanTextTest.cpp - The plan as text --------------------------------===//

#include "meshfold/Support/PlanText.h"

#include "gtest/gtest.h"

#include <optional>

using namespace meshfold;

namespace {
/// The seed plan as the runtime tests give it (defaults left out).
const char *kSeedPlanText = "devices=32 gpus_per_node=8 "
                            "attention=tp:2,cp:2,dp:4,pp:2 "
                            "experts=ep:16:tp+cp+dp,pp:2:pp";
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

TEST(PlanText, ParsesTheSeedPlan) {
  PlanSpec spec;
  std::string error;
  ASSERT_TRUE(parsePlanText(
      std::string(kSeedPlanText) + " nvlink_gbps=400 ib_gbps=25", spec, &error))
      << error;
  EXPECT_EQ(spec.devices, 32);
  EXPECT_EQ(spec.gpusPerNode, 8);
  EXPECT_EQ(spec.nvlinkGBps, 400);
  EXPECT_EQ(spec.ibGBps, 25);
  ASSERT_EQ(spec.attention.size(), 4u);
  EXPECT_EQ(spec.attention[2].name, "dp");
  EXPECT_EQ(spec.attention[2].size, 4);
  ASSERT_EQ(spec.experts.size(), 2u);
  EXPECT_EQ(spec.experts[0].composedOf,
            (std::vector<std::string>{"tp", "cp", "dp"}));
  std::optional<MeshLayout> layout = layoutFromPlanText(kSeedPlanText, &error);
  ASSERT_TRUE(layout) << error;
  EXPECT_EQ(layout->group(11, {"ep"}).size(), 16u);
  EXPECT_EQ(layout->relay(11, 0), 3);
}

TEST(PlanText, DefaultsDevicesAndExperts) {
  std::string error;
  std::optional<MeshLayout> layout =
      layoutFromPlanText("attention=tp:2,cp:2,dp:4,pp:2", &error);
  ASSERT_TRUE(layout) << error;
  EXPECT_EQ(layout->numDevices(), 32);
  EXPECT_EQ(layout->axisSize("ep"), 16);
  EXPECT_EQ(layout->expertOwner(5, 32, 0), 2);
}

TEST(PlanText, RejectsBadText) {
  PlanSpec spec;
  std::string error;
  EXPECT_FALSE(parsePlanText("devices=32", spec, &error));
  EXPECT_NE(error.find("attention"), std::string::npos) << error;
  EXPECT_FALSE(parsePlanText("attention=tp2", spec, &error));
  EXPECT_NE(error.find("name:size"), std::string::npos) << error;
  EXPECT_FALSE(parsePlanText("attention=tp:2 foo=1", spec, &error));
  EXPECT_NE(error.find("unknown field 'foo'"), std::string::npos) << error;
}
