//===- MeshLayoutTest.cpp - Tests for the group math ----------------------===//

#include "meshfold/Support/MeshLayout.h"

#include <gtest/gtest.h>

#include <limits>

#include <set>

using namespace meshfold;

namespace {

using Ranks = std::vector<int64_t>;

/// Builds a layout from flags, failing the test on error.
MeshLayout fromFlags(int64_t tp, int64_t cp, int64_t dp, int64_t pp, int64_t ep,
                     const std::string &order, int64_t gpusPerNode = 8) {
  PlanSpec spec;
  std::string error;
  bool ok =
      PlanSpec::fromFlags(tp, cp, dp, pp, ep, order, gpusPerNode, spec, &error);
  EXPECT_TRUE(ok) << error;
  EXPECT_EQ(error, "");
  std::optional<MeshLayout> layout = MeshLayout::create(spec, &error);
  EXPECT_TRUE(layout.has_value()) << error;
  return *layout;
}

MeshLayout seed() { return fromFlags(2, 2, 4, 2, 16, "tp,cp,dp,pp"); }

/// The seed plan written by hand, to be broken one field at a time.
PlanSpec seedSpec() {
  PlanSpec spec;
  spec.devices = 32;
  spec.gpusPerNode = 8;
  spec.attention = {{"tp", 2}, {"cp", 2}, {"dp", 4}, {"pp", 2}};
  spec.experts = {{"ep", 16, {"tp", "cp", "dp"}}, {"pp", 2, {"pp"}}};
  return spec;
}

/// Runs create() on a spec expected to fail and returns the message.
std::string createError(const PlanSpec &spec) {
  std::string error;
  std::optional<MeshLayout> layout = MeshLayout::create(spec, &error);
  EXPECT_FALSE(layout.has_value());
  return error;
}

/// Runs fromFlags() expecting failure and returns the message.
std::string flagsError(int64_t tp, int64_t cp, int64_t dp, int64_t pp,
                       int64_t ep, const std::string &order,
                       int64_t gpusPerNode = 8) {
  PlanSpec spec;
  spec.devices = 7; // must stay untouched
  std::string error;
  EXPECT_FALSE(PlanSpec::fromFlags(tp, cp, dp, pp, ep, order, gpusPerNode, spec,
                                   &error));
  EXPECT_EQ(spec.devices, 7);
  return error;
}

#define EXPECT_CONTAINS(haystack, needle)                                      \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos)             \
      << "'" << (haystack) << "' does not contain '" << (needle) << "'"

/// The one-device plan: one GPU, every attention axis of size 1 and the
/// expert mesh ep (over tp, cp, dp) and pp.
TEST(MeshLayoutSingleDevice, EveryAxisOfSizeOne) {
  PlanSpec spec = PlanSpec::singleDevice();
  EXPECT_EQ(spec.devices, 1);
  EXPECT_EQ(spec.gpusPerNode, 1);
  ASSERT_EQ(spec.attention.size(), 4u);
  const char *names[] = {"tp", "cp", "dp", "pp"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(spec.attention[i].name, names[i]);
    EXPECT_EQ(spec.attention[i].size, 1);
  }
  ASSERT_EQ(spec.experts.size(), 2u);
  EXPECT_EQ(spec.experts[0].name, "ep");
  EXPECT_EQ(spec.experts[0].size, 1);
  EXPECT_EQ(spec.experts[0].composedOf,
            (std::vector<std::string>{"tp", "cp", "dp"}));
  EXPECT_EQ(spec.experts[1].name, "pp");
  EXPECT_EQ(spec.experts[1].size, 1);
  EXPECT_EQ(spec.experts[1].composedOf, (std::vector<std::string>{"pp"}));
}

//===----------------------------------------------------------------------===//
// The seed plan: TP2 x CP2 x DP4 x PP2 attention, EP16 x PP2 experts.
//===----------------------------------------------------------------------===//

TEST(MeshLayoutSeed, FromFlagsBuildsBothMeshes) {
  PlanSpec spec;
  std::string error;
  ASSERT_TRUE(
      PlanSpec::fromFlags(2, 2, 4, 2, 16, "tp,cp,dp,pp", 8, spec, &error));
  EXPECT_EQ(spec.devices, 32);
  EXPECT_EQ(spec.gpusPerNode, 8);
  ASSERT_EQ(spec.attention.size(), 4u);
  EXPECT_EQ(spec.attention[0].name, "tp");
  EXPECT_EQ(spec.attention[3].name, "pp");
  EXPECT_EQ(spec.attention[2].size, 4);
  ASSERT_EQ(spec.experts.size(), 2u);
  EXPECT_EQ(spec.experts[0].name, "ep");
  EXPECT_EQ(spec.experts[0].size, 16);
  EXPECT_EQ(spec.experts[0].composedOf,
            (std::vector<std::string>{"tp", "cp", "dp"}));
  EXPECT_EQ(spec.experts[1].name, "pp");
  EXPECT_EQ(spec.experts[1].composedOf, (std::vector<std::string>{"pp"}));
}

TEST(MeshLayoutSeed, Sizes) {
  MeshLayout l = seed();
  EXPECT_EQ(l.numDevices(), 32);
  EXPECT_EQ(l.gpusPerNode(), 8);
  EXPECT_EQ(l.numNodes(), 4);
  EXPECT_EQ(l.axisSize("tp"), 2);
  EXPECT_EQ(l.axisSize("cp"), 2);
  EXPECT_EQ(l.axisSize("dp"), 4);
  EXPECT_EQ(l.axisSize("pp"), 2);
  EXPECT_EQ(l.axisSize("ep"), 16);
  EXPECT_EQ(l.axisSize("sp"), 1);
  EXPECT_TRUE(l.hasAxis("ep"));
  EXPECT_FALSE(l.hasAxis("sp"));
  EXPECT_EQ(l.spec().devices, 32);
}

TEST(MeshLayoutSeed, CoordinatesOfRank11) {
  MeshLayout l = seed();
  EXPECT_EQ(l.coord(11, "tp"), 1);
  EXPECT_EQ(l.coord(11, "cp"), 1);
  EXPECT_EQ(l.coord(11, "dp"), 2);
  EXPECT_EQ(l.coord(11, "pp"), 0);
  EXPECT_EQ(l.coord(11, "ep"), 11);
  EXPECT_EQ(l.coord(27, "ep"), 11);
  EXPECT_EQ(l.coord(27, "pp"), 1);
  EXPECT_EQ(l.coord(11, "sp"), 0);
  EXPECT_EQ(l.coord(32, "tp"), -1);
  EXPECT_EQ(l.stageOf(11), 0);
  EXPECT_EQ(l.stageOf(27), 1);
  EXPECT_EQ(l.describe(11), "tp 1, cp 1, dp 2, pp 0");
  std::map<std::string, int64_t> expected = {
      {"tp", 1}, {"cp", 1}, {"dp", 2}, {"pp", 0}};
  EXPECT_EQ(l.coords(11), expected);
}

TEST(MeshLayoutSeed, RankOf) {
  MeshLayout l = seed();
  EXPECT_EQ(l.rankOf({{"tp", 1}, {"cp", 1}, {"dp", 2}, {"pp", 0}}), 11);
  EXPECT_EQ(l.rankOf({{"tp", 1}, {"cp", 1}, {"dp", 2}, {"pp", 1}}), 27);
  EXPECT_EQ(l.rankOf({{"dp", 3}}), 12);
  EXPECT_EQ(l.rankOf({}), 0);
  EXPECT_EQ(l.rankOf({{"ep", 13}, {"pp", 1}}), 29);
  EXPECT_EQ(l.rankOf({{"sp", 0}, {"tp", 1}}), 1);
  EXPECT_EQ(l.rankOf({{"tp", 2}}), -1);
  EXPECT_EQ(l.rankOf({{"sp", 1}}), -1);
  for (int64_t r = 0; r < 32; ++r)
    EXPECT_EQ(l.rankOf(l.coords(r)), r);
}

TEST(MeshLayoutSeed, GroupsOfRank11) {
  MeshLayout l = seed();
  EXPECT_EQ(l.group(11, {"tp"}), (Ranks{10, 11}));
  EXPECT_EQ(l.group(11, {"cp"}), (Ranks{9, 11}));
  EXPECT_EQ(l.group(11, {"dp"}), (Ranks{3, 7, 11, 15}));
  EXPECT_EQ(l.group(11, {"pp"}), (Ranks{11, 27}));
  Ranks stage0;
  for (int64_t r = 0; r < 16; ++r)
    stage0.push_back(r);
  EXPECT_EQ(l.group(11, {"ep"}), stage0);
  EXPECT_EQ(l.group(11, {"tp", "cp"}), (Ranks{8, 9, 10, 11}));
  EXPECT_EQ(l.group(11, {"cp", "tp"}), (Ranks{8, 10, 9, 11}));
  // tp is already part of ep: it counts once.
  EXPECT_EQ(l.group(11, {"ep", "tp"}), stage0);
  EXPECT_EQ(l.group(11, {}), (Ranks{11}));
  EXPECT_EQ(l.group(11, {"sp"}), (Ranks{11}));
  EXPECT_EQ(l.group(-1, {"tp"}), Ranks{});
  EXPECT_EQ(l.groupSize({"ep"}), 16);
  EXPECT_EQ(l.groupSize({"tp", "dp"}), 8);
}

TEST(MeshLayoutSeed, GroupRankMatchesGroupIndex) {
  MeshLayout l = seed();
  EXPECT_EQ(l.groupRank(11, {"tp"}), 1);
  EXPECT_EQ(l.groupRank(11, {"cp"}), 1);
  EXPECT_EQ(l.groupRank(11, {"dp"}), 2);
  EXPECT_EQ(l.groupRank(11, {"ep"}), 11);
  EXPECT_EQ(l.groupRank(27, {"ep"}), 11);
  EXPECT_EQ(l.groupRank(27, {"pp"}), 1);
  EXPECT_EQ(l.groupRank(11, {"cp", "tp"}), 3);
  EXPECT_EQ(l.groupRank(99, {"tp"}), -1);
  const std::vector<std::vector<std::string>> axesList = {
      {"tp"}, {"cp"}, {"dp"}, {"pp"}, {"ep"}, {"dp", "tp"}, {"pp", "ep"}};
  for (const auto &axes : axesList)
    for (int64_t r = 0; r < 32; ++r) {
      Ranks g = l.group(r, axes);
      int64_t idx = l.groupRank(r, axes);
      ASSERT_GE(idx, 0);
      ASSERT_LT(idx, static_cast<int64_t>(g.size()));
      EXPECT_EQ(g[idx], r);
      EXPECT_EQ(static_cast<int64_t>(g.size()), l.groupSize(axes));
    }
}

TEST(MeshLayoutSeed, Experts) {
  MeshLayout l = seed();
  EXPECT_EQ(l.expertOwner(5, 32, 0), 2);
  EXPECT_EQ(l.expertOwner(27, 32, 0), 13);
  EXPECT_EQ(l.expertOwner(5, 32, 1), 18);
  EXPECT_EQ(l.expertOwner(27, 32, 1), 29);
  // Expert e on GPU 16*pp + e/2 (docs/design.md §2).
  for (int64_t stage = 0; stage < 2; ++stage)
    for (int64_t e = 0; e < 32; ++e)
      EXPECT_EQ(l.expertOwner(e, 32, stage), 16 * stage + e / 2);
  EXPECT_EQ(l.localExperts(2, 32), (std::pair<int64_t, int64_t>{4, 2}));
  EXPECT_EQ(l.localExperts(13, 32), (std::pair<int64_t, int64_t>{26, 2}));
  EXPECT_EQ(l.localExperts(29, 32), (std::pair<int64_t, int64_t>{26, 2}));
  EXPECT_EQ(l.localExperts(0, 64), (std::pair<int64_t, int64_t>{0, 4}));
  // Bad inputs.
  EXPECT_EQ(l.expertOwner(5, 24, 0), -1);
  EXPECT_EQ(l.expertOwner(32, 32, 0), -1);
  EXPECT_EQ(l.expertOwner(5, 32, 2), -1);
  EXPECT_EQ(l.localExperts(2, 24), (std::pair<int64_t, int64_t>{-1, 0}));
}

TEST(MeshLayoutSeed, Stages) {
  MeshLayout l = seed();
  // Layers 1-4 (0-based 0-3) on stage 0, layers 5-8 on stage 1.
  EXPECT_EQ(l.stageOfLayer(0, 8), 0);
  EXPECT_EQ(l.stageOfLayer(3, 8), 0);
  EXPECT_EQ(l.stageOfLayer(4, 8), 1);
  EXPECT_EQ(l.stageOfLayer(7, 8), 1);
  EXPECT_EQ(l.stageOfLayer(8, 8), -1);
  EXPECT_EQ(l.stageOfLayer(0, 7), -1);
}

TEST(MeshLayoutSeed, NodesRelaysLinks) {
  MeshLayout l = seed();
  EXPECT_EQ(l.node(11), 1);
  EXPECT_EQ(l.node(27), 3);
  EXPECT_EQ(l.localIndex(11), 3);
  EXPECT_EQ(l.relay(11, 0), 3);
  EXPECT_EQ(l.relay(27, 2), 19);
  EXPECT_EQ(l.relay(11, 1), 11);
  EXPECT_EQ(l.link(11, 13), LinkClass::NVLink);
  EXPECT_EQ(l.link(11, 2), LinkClass::IB);
  EXPECT_EQ(l.link(11, 11), LinkClass::Self);
  EXPECT_EQ(l.link(3, 2), LinkClass::NVLink);
  EXPECT_EQ(l.link(11, 27), LinkClass::IB);
  EXPECT_STREQ(linkClassName(LinkClass::NVLink), "nvlink");
  EXPECT_STREQ(linkClassName(LinkClass::IB), "ib");
  EXPECT_STREQ(linkClassName(LinkClass::Self), "self");
  EXPECT_EQ(l.bandwidthGBps(LinkClass::NVLink), 450);
  EXPECT_EQ(l.bandwidthGBps(LinkClass::IB), 50);
  EXPECT_EQ(l.bandwidthGBps(LinkClass::Self), 0);
}

TEST(MeshLayoutSeed, TokenJourneyOnGpu11) {
  // docs/design.md §4: the hop-4 dispatch from GPU 11 to experts 5 and 27.
  MeshLayout l = seed();
  int64_t e5 = l.expertOwner(5, 32, l.stageOf(11));
  int64_t e27 = l.expertOwner(27, 32, l.stageOf(11));
  EXPECT_EQ(e5, 2);
  EXPECT_EQ(e27, 13);
  EXPECT_EQ(l.link(11, e27), LinkClass::NVLink);
  EXPECT_EQ(l.link(11, e5), LinkClass::IB);
  int64_t relay = l.relay(11, l.node(e5));
  EXPECT_EQ(relay, 3);
  EXPECT_EQ(l.link(relay, e5), LinkClass::NVLink);
  // Hop 5: PP send to the pp partner.
  EXPECT_EQ(l.group(11, {"pp"})[1], 27);
  // Stage 1 partners of GPU 27: TP 26, CP 25, relay on node 2 is 19.
  EXPECT_EQ(l.group(27, {"tp"}), (Ranks{26, 27}));
  EXPECT_EQ(l.group(27, {"cp"}), (Ranks{25, 27}));
  EXPECT_EQ(l.group(27, {"tp", "cp"}), (Ranks{24, 25, 26, 27}));
}

TEST(MeshLayoutSeed, ModelFits) {
  MeshLayout l = seed();
  EXPECT_EQ(l.checkModel({32, 8, 32, 8}), "");
  // n_kv = 1 < TP = 2 and TP is a multiple of n_kv: KV heads replicated.
  EXPECT_EQ(l.checkModel({32, 1, 32, 8}), "");
}

//===----------------------------------------------------------------------===//
// Swapped order: rank = tp + 2*cp + 4*pp + 8*dp.
//===----------------------------------------------------------------------===//

TEST(MeshLayoutSwapped, StageIsNotContiguous) {
  MeshLayout l = fromFlags(2, 2, 4, 2, 16, "tp,cp,pp,dp");
  EXPECT_EQ(l.spec().experts[0].composedOf,
            (std::vector<std::string>{"tp", "cp", "dp"}));
  EXPECT_EQ(l.rankOf({{"tp", 1}, {"cp", 1}, {"pp", 1}, {"dp", 2}}), 23);
  EXPECT_EQ(l.coord(23, "pp"), 1);
  EXPECT_EQ(l.coord(23, "dp"), 2);
  Ranks stage0 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
  EXPECT_EQ(l.group(0, {"ep"}), stage0);
  EXPECT_EQ(l.group(27, {"ep"}), stage0);
  Ranks stage1 = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
  EXPECT_EQ(l.group(4, {"ep"}), stage1);
  // pp groups pair the ranks that share (tp, cp, dp).
  EXPECT_EQ(l.group(0, {"pp"}), (Ranks{0, 4}));
  EXPECT_EQ(l.group(11, {"pp"}), (Ranks{11, 15}));
  EXPECT_EQ(l.group(27, {"pp"}), (Ranks{27, 31}));
  for (int64_t r = 0; r < 32; ++r) {
    Ranks g = l.group(r, {"pp"});
    ASSERT_EQ(g.size(), 2u);
    for (const char *axis : {"tp", "cp", "dp"})
      EXPECT_EQ(l.coord(g[0], axis), l.coord(g[1], axis));
    EXPECT_EQ(l.coord(g[0], "pp"), 0);
    EXPECT_EQ(l.coord(g[1], "pp"), 1);
    EXPECT_EQ(l.coord(g[0], "ep"), l.coord(g[1], "ep"));
    // Same rail or not, the pp send now stays on one node.
    EXPECT_EQ(l.link(g[0], g[1]), LinkClass::NVLink);
  }
  // Experts: ep coordinate e/2, e.g. expert 5 -> ep 2 -> (tp 0, cp 1, dp 0).
  EXPECT_EQ(l.expertOwner(5, 32, 0), 2);
  EXPECT_EQ(l.expertOwner(27, 32, 0), 25); // ep 13 = tp 1, cp 0, dp 3
  EXPECT_EQ(l.expertOwner(27, 32, 1), 29);
  EXPECT_EQ(l.localExperts(25, 32), (std::pair<int64_t, int64_t>{26, 2}));
  // DP group of rank 11 (tp 1, cp 0, pp 0, dp 1): one per node.
  EXPECT_EQ(l.group(11, {"dp"}), (Ranks{3, 11, 19, 27}));
}

//===----------------------------------------------------------------------===//
// Other layouts on 32 GPUs.
//===----------------------------------------------------------------------===//

TEST(MeshLayoutOther, Dp32Ep32) {
  MeshLayout l = fromFlags(1, 1, 32, 1, 32, "tp,cp,dp,pp");
  EXPECT_EQ(l.numDevices(), 32);
  EXPECT_EQ(l.axisSize("ep"), 32);
  EXPECT_EQ(l.axisSize("pp"), 1);
  Ranks all;
  for (int64_t r = 0; r < 32; ++r)
    all.push_back(r);
  EXPECT_EQ(l.group(0, {"ep"}), all);
  EXPECT_EQ(l.group(17, {"ep"}), all);
  EXPECT_EQ(l.group(17, {"dp"}), all);
  EXPECT_EQ(l.group(17, {"tp"}), (Ranks{17}));
  for (int64_t e = 0; e < 32; ++e)
    EXPECT_EQ(l.expertOwner(e, 32, 0), e);
  EXPECT_EQ(l.localExperts(9, 32), (std::pair<int64_t, int64_t>{9, 1}));
  EXPECT_EQ(l.stageOfLayer(7, 8), 0);
  EXPECT_EQ(l.checkModel({32, 8, 32, 61}), "");
}

TEST(MeshLayoutOther, Dp32WrittenWithoutCp) {
  PlanSpec spec;
  spec.devices = 32;
  spec.attention = {{"dp", 32}};
  spec.experts = {{"ep", 32, {"dp"}}};
  std::string error;
  std::optional<MeshLayout> l = MeshLayout::create(spec, &error);
  ASSERT_TRUE(l.has_value()) << error;
  EXPECT_EQ(l->axisSize("cp"), 1);
  EXPECT_EQ(l->axisSize("tp"), 1);
  EXPECT_EQ(l->axisSize("pp"), 1);
  EXPECT_EQ(l->coord(20, "cp"), 0);
  EXPECT_EQ(l->coord(20, "ep"), 20);
  EXPECT_EQ(l->group(20, {"cp"}), (Ranks{20}));
  EXPECT_EQ(l->groupRank(20, {"tp"}), 0);
  EXPECT_EQ(l->expertOwner(20, 32, 0), 20);
  EXPECT_EQ(l->stageOf(20), 0);
}

TEST(MeshLayoutOther, Tp4Cp2Dp2Pp2) {
  MeshLayout l = fromFlags(4, 2, 2, 2, 16, "tp,cp,dp,pp");
  EXPECT_EQ(l.group(5, {"tp"}), (Ranks{4, 5, 6, 7}));
  EXPECT_EQ(l.group(5, {"cp"}), (Ranks{1, 5}));
  EXPECT_EQ(l.group(5, {"dp"}), (Ranks{5, 13}));
  EXPECT_EQ(l.group(5, {"pp"}), (Ranks{5, 21}));
  EXPECT_EQ(l.groupRank(5, {"tp"}), 1);
  EXPECT_EQ(l.checkModel({32, 8, 32, 8}), "");
  // n_kv = 2 < TP = 4, and 4 is a multiple of 2: accepted.
  EXPECT_EQ(l.checkModel({32, 2, 32, 8}), "");
}

TEST(MeshLayoutOther, Tp1Cp4Dp4Pp2) {
  MeshLayout l = fromFlags(1, 4, 4, 2, 16, "tp,cp,dp,pp");
  EXPECT_EQ(l.group(5, {"cp"}), (Ranks{4, 5, 6, 7}));
  EXPECT_EQ(l.group(5, {"tp"}), (Ranks{5}));
  EXPECT_EQ(l.group(5, {"dp"}), (Ranks{1, 5, 9, 13}));
  EXPECT_EQ(l.groupRank(5, {"cp"}), 1);
  EXPECT_EQ(l.expertOwner(5, 32, 1), 18);
}

TEST(MeshLayoutOther, SmallPlanOnOnePartlyFilledNode) {
  MeshLayout l = fromFlags(2, 1, 1, 1, 2, "tp,cp,dp,pp");
  EXPECT_EQ(l.numDevices(), 2);
  EXPECT_EQ(l.numNodes(), 1);
  EXPECT_EQ(l.link(0, 1), LinkClass::NVLink);
  EXPECT_EQ(l.group(1, {"tp"}), (Ranks{0, 1}));
}

//===----------------------------------------------------------------------===//
// Plan rules, one test per rule.
//===----------------------------------------------------------------------===//

TEST(MeshLayoutRules, SeedSpecIsValid) {
  std::string error = "stale";
  std::optional<MeshLayout> l = MeshLayout::create(seedSpec(), &error);
  ASSERT_TRUE(l.has_value()) << error;
  EXPECT_EQ(error, "");
  EXPECT_EQ(l->group(11, {"dp"}), (Ranks{3, 7, 11, 15}));
  // A null error pointer is fine.
  EXPECT_TRUE(MeshLayout::create(seedSpec(), nullptr).has_value());
  PlanSpec bad = seedSpec();
  bad.devices = 64;
  EXPECT_FALSE(MeshLayout::create(bad, nullptr).has_value());
}

TEST(MeshLayoutRules, AxisSize) {
  PlanSpec spec = seedSpec();
  spec.attention[1].size = 0;
  std::string error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'axis-size'");
  EXPECT_CONTAINS(error, "'cp' has size 0");

  spec = seedSpec();
  spec.experts[0].size = -16;
  error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'axis-size'");
  EXPECT_CONTAINS(error, "'ep' has size -16");

  error = flagsError(2, 2, 0, 2, 16, "tp,cp,dp,pp");
  EXPECT_CONTAINS(error, "plan rule 'axis-size'");
  EXPECT_CONTAINS(error, "'dp' has size 0");
}

TEST(MeshLayoutRules, DuplicateAxis) {
  PlanSpec spec = seedSpec();
  spec.attention[2].name = "tp";
  std::string error = createError(spec);
  EXPECT_EQ(error.rfind("plan rule 'duplicate-axis'", 0), 0u) << error;
  EXPECT_CONTAINS(error, "'tp'");

  spec = seedSpec();
  spec.experts[1].name = "ep";
  error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'duplicate-axis'");
  EXPECT_CONTAINS(error, "expert mesh has two axes named 'ep'");

  error = flagsError(2, 2, 4, 2, 16, "tp,cp,cp,pp");
  EXPECT_CONTAINS(error, "plan rule 'duplicate-axis'");
  EXPECT_CONTAINS(error, "'cp' twice");
}

// A device count past 2^20 is refused before any product: fuzzing found
// axes whose product saturates at INT64_MAX matching such a count.
TEST(MeshLayoutRules, TooManyDevices) {
  PlanSpec spec = seedSpec();
  int64_t big = std::numeric_limits<int64_t>::max();
  spec.devices = big;
  spec.attention[0].size = int64_t(1) << 40;
  spec.attention[1].size = int64_t(1) << 40;
  spec.experts[0].size = big;
  EXPECT_EQ(createError(spec),
            "plan rule 'mesh-size': the plan has 9223372036854775807 devices, "
            "more than meshfold supports (2^20)");
}

TEST(MeshLayoutRules, MeshSize) {
  PlanSpec spec = seedSpec();
  spec.attention[3].size = 1; // 2*2*4*1 = 16 on 32 devices
  spec.experts[1].size = 1;
  std::string error = createError(spec);
  EXPECT_EQ(error, "plan rule 'mesh-size': attention mesh axes multiply to "
                   "16, but the plan has 32 devices");

  spec = seedSpec();
  spec.experts[0].size = 8; // 8*2 = 16 on 32 devices
  error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'mesh-size'");
  EXPECT_CONTAINS(error, "expert mesh axes multiply to 16");
  EXPECT_CONTAINS(error, "32 devices");

  // An expert axis that is not the product of its components.
  spec = seedSpec();
  spec.experts = {{"ep", 8, {"tp", "cp"}}, {"pp", 4, {"pp", "dp"}}};
  error = createError(spec);
  EXPECT_EQ(error, "plan rule 'mesh-size': expert axis 'ep' has size 8, but "
                   "its components tp,cp multiply to 4");
  spec.experts = {{"ep", 32, {"tp", "cp", "dp"}}, {"pp", 1, {"pp"}}};
  error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'mesh-size'");
  EXPECT_CONTAINS(error, "expert axis 'ep' has size 32");
  EXPECT_CONTAINS(error, "tp,cp,dp multiply to 16");

  spec = seedSpec();
  spec.devices = 0;
  error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'mesh-size'");
  EXPECT_CONTAINS(error, "0 devices");

  error = flagsError(2, 2, 4, 2, 8, "tp,cp,dp,pp");
  EXPECT_EQ(error, "plan rule 'mesh-size': etp*ep*edp = 1*8*1 = 8 must equal "
                   "tp*cp*dp = 2*2*4 = 16: try --ep 8 --etp 2 or --ep 8 "
                   "--edp 2");
}

TEST(MeshLayoutRules, NodeSize) {
  PlanSpec spec = seedSpec();
  spec.gpusPerNode = 0;
  std::string error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'node-size'");
  EXPECT_CONTAINS(error, "is 0");

  spec.gpusPerNode = 6;
  error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'node-size'");
  EXPECT_CONTAINS(error, "6 GPUs per node do not divide 32 devices");

  error = flagsError(2, 2, 4, 2, 16, "tp,cp,dp,pp", 12);
  EXPECT_CONTAINS(error, "plan rule 'node-size'");
  EXPECT_CONTAINS(error, "12 GPUs per node");
}

TEST(MeshLayoutRules, Fold) {
  // Unknown component.
  PlanSpec spec = seedSpec();
  spec.experts[0].composedOf = {"tp", "sp", "dp"};
  std::string error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'fold'");
  EXPECT_CONTAINS(error, "'sp', which is not an attention axis");

  // An attention axis named twice.
  spec = seedSpec();
  spec.experts = {{"ep", 16, {"tp", "cp", "dp"}}, {"pp", 2, {"tp"}}};
  error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'fold'");
  EXPECT_CONTAINS(error, "'tp' is named twice");

  // An expert axis with no components.
  spec = seedSpec();
  spec.experts = {{"ep", 8, {"tp", "dp"}}, {"pp", 2, {"pp"}}, {"z", 2, {}}};
  error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'fold'");
  EXPECT_CONTAINS(error, "'z' is composed of no attention axes");

  // An attention axis left out (even one of size 1).
  spec = seedSpec();
  spec.attention = {{"tp", 2}, {"cp", 1}, {"dp", 8}, {"pp", 2}};
  spec.experts = {{"ep", 16, {"tp", "dp"}}, {"pp", 2, {"pp"}}};
  error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'fold'");
  EXPECT_CONTAINS(error, "attention axis 'cp' (size 1) is not part of any "
                         "expert axis");

  // No axis named ep.
  spec = seedSpec();
  spec.experts[0].name = "moe";
  error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'fold'");
  EXPECT_CONTAINS(error, "no axis named 'ep'");

  // Unknown or missing names in a --order.
  error = flagsError(2, 2, 4, 2, 16, "tp,cp,xp,pp");
  EXPECT_CONTAINS(error, "plan rule 'fold'");
  EXPECT_CONTAINS(error, "'xp'");
  error = flagsError(2, 2, 4, 2, 16, "tp,cp,dp");
  EXPECT_CONTAINS(error, "plan rule 'fold'");
  EXPECT_CONTAINS(error, "lacks 'pp'");
}

TEST(MeshLayoutRules, PpGroups) {
  // The expert mesh pipelines over dp instead of pp: different pp groups.
  PlanSpec spec = seedSpec();
  spec.attention = {{"tp", 2}, {"cp", 2}, {"dp", 2}, {"pp", 4}};
  spec.experts = {{"ep", 16, {"tp", "cp", "pp"}}, {"pp", 2, {"dp"}}};
  std::string error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'pp-groups'");
  EXPECT_CONTAINS(error, "expert axis 'pp' (size 2) is composed of dp");

  // The pp stages exist only under another name in the expert mesh.
  spec = seedSpec();
  spec.experts[1].name = "stage";
  error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'pp-groups'");
  EXPECT_CONTAINS(error, "pp=2");
  EXPECT_CONTAINS(error, "no axis named 'pp'");

  // pp folded together with another axis.
  spec = seedSpec();
  spec.experts = {{"ep", 4, {"tp", "cp"}}, {"pp", 8, {"pp", "dp"}}};
  error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'pp-groups'");
  EXPECT_CONTAINS(error, "composed of pp,dp");
}

//===----------------------------------------------------------------------===//
// Model rules.
//===----------------------------------------------------------------------===//

TEST(MeshLayoutModelRules, TpHeads) {
  MeshLayout l = fromFlags(4, 2, 2, 2, 16, "tp,cp,dp,pp");
  std::string error = l.checkModel({30, 8, 32, 8});
  EXPECT_EQ(error.rfind("plan rule 'tp-heads'", 0), 0u) << error;
  EXPECT_CONTAINS(error, "TP=4 must divide n_heads=30");
}

TEST(MeshLayoutModelRules, Gqa) {
  MeshLayout l = fromFlags(4, 2, 2, 2, 16, "tp,cp,dp,pp");
  // n_kv = 6 >= TP = 4 and 4 does not divide 6.
  std::string error = l.checkModel({32, 6, 32, 8});
  EXPECT_EQ(error.rfind("plan rule 'gqa'", 0), 0u) << error;
  EXPECT_CONTAINS(error, "TP=4 must divide n_kv=6");
  // n_kv = 3 < TP = 4, but 4 is not a multiple of 3.
  error = l.checkModel({24, 3, 32, 8});
  EXPECT_CONTAINS(error, "plan rule 'gqa'");
  EXPECT_CONTAINS(error, "n_kv=3");
  error = l.checkModel({32, 0, 32, 8});
  EXPECT_CONTAINS(error, "plan rule 'gqa'");
  EXPECT_CONTAINS(error, "n_kv=0");
}

TEST(MeshLayoutModelRules, EpExperts) {
  MeshLayout l = seed();
  std::string error = l.checkModel({32, 8, 24, 8});
  EXPECT_EQ(error.rfind("plan rule 'ep-experts'", 0), 0u) << error;
  EXPECT_CONTAINS(error, "EP=16 must divide n_experts=24");
}

TEST(MeshLayoutModelRules, EtpFfn) {
  PlanFlags f;
  f.tp = 2;
  f.etp = 2;
  PlanSpec spec;
  std::string error;
  ASSERT_TRUE(PlanSpec::fromFlags(f, spec, &error)) << error;
  std::optional<MeshLayout> l = MeshLayout::create(spec, &error);
  ASSERT_TRUE(l.has_value()) << error;
  EXPECT_EQ(l->checkModel({4, 2, 8, 2, 0, 64}), "");
  error = l->checkModel({4, 2, 8, 2, 0, 63});
  EXPECT_EQ(error, "plan rule 'etp-ffn': ETP=2 must divide the expert FFN "
                   "width (63) to split each expert");
}

TEST(MeshLayoutModelRules, PpLayers) {
  MeshLayout l = seed();
  std::string error = l.checkModel({32, 8, 32, 7});
  EXPECT_EQ(error.rfind("plan rule 'pp-layers'", 0), 0u) << error;
  EXPECT_CONTAINS(error, "PP=2 must divide n_layers=7");
}

} // namespace

TEST(MeshLayoutRules, TPVocab) {
  meshfold::PlanSpec spec;
  std::string error;
  ASSERT_TRUE(meshfold::PlanSpec::fromFlags(8, 1, 1, 1, 8, "tp,cp,dp,pp", 8,
                                            spec, &error))
      << error;
  auto layout = meshfold::MeshLayout::create(spec, &error);
  ASSERT_TRUE(layout.has_value()) << error;
  meshfold::ModelDims dims{8, 8, 8, 2, 500};
  std::string msg = layout->checkModel(dims);
  EXPECT_NE(msg.find("plan rule 'tp-vocab'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("500"), std::string::npos) << msg;
  dims.vocab = 512;
  EXPECT_EQ(layout->checkModel(dims), "");
}

//===----------------------------------------------------------------------===//
// The expert mesh folded: ETP x EP x EDP over the seed's attention mesh.
//===----------------------------------------------------------------------===//

namespace {

/// The seed's attention sizes with the given expert mesh.
PlanFlags seedFlags(int64_t etp, int64_t ep, int64_t edp,
                    const std::string &expertOrder,
                    const std::string &order = "tp,cp,dp,pp") {
  PlanFlags f;
  f.tp = 2;
  f.cp = 2;
  f.dp = 4;
  f.pp = 2;
  f.etp = etp;
  f.ep = ep;
  f.edp = edp;
  f.order = order;
  f.expertOrder = expertOrder;
  return f;
}

MeshLayout folded(int64_t etp, int64_t ep, int64_t edp,
                  const std::string &expertOrder = "etp,ep,edp",
                  const std::string &order = "tp,cp,dp,pp") {
  PlanSpec spec;
  std::string error;
  EXPECT_TRUE(PlanSpec::fromFlags(seedFlags(etp, ep, edp, expertOrder, order),
                                  spec, &error))
      << error;
  std::optional<MeshLayout> layout = MeshLayout::create(spec, &error);
  EXPECT_TRUE(layout.has_value()) << error;
  return *layout;
}

std::string foldedError(int64_t etp, int64_t ep, int64_t edp,
                        const std::string &expertOrder = "etp,ep,edp") {
  PlanSpec spec;
  std::string error;
  EXPECT_FALSE(
      PlanSpec::fromFlags(seedFlags(etp, ep, edp, expertOrder), spec, &error));
  return error;
}

/// Every rank is the rank of its own expert coordinates, and the expert
/// axes' groups partition each stage.
void expectConsistent(const MeshLayout &l) {
  for (int64_t r = 0; r < l.numDevices(); ++r) {
    std::map<std::string, int64_t> c;
    for (const ExpertAxis &axis : l.spec().experts)
      c[axis.name] = l.coord(r, axis.name);
    EXPECT_EQ(l.rankOf(c), r);
    for (const ExpertAxis &axis : l.spec().experts) {
      Ranks g = l.group(r, {axis.name});
      ASSERT_EQ(int64_t(g.size()), axis.size);
      EXPECT_EQ(g[size_t(l.coord(r, axis.name))], r);
      for (size_t i = 0; i < g.size(); ++i) {
        EXPECT_EQ(l.coord(g[i], axis.name), int64_t(i));
        for (const ExpertAxis &other : l.spec().experts) {
          if (other.name != axis.name) {
            EXPECT_EQ(l.coord(g[i], other.name), l.coord(r, other.name));
          }
        }
      }
    }
  }
}

} // namespace

TEST(MeshLayoutFold, Ep8Etp2) {
  MeshLayout l = folded(2, 8, 1);
  ASSERT_EQ(l.spec().experts.size(), 3u);
  EXPECT_EQ(l.spec().experts[0].name, "etp");
  EXPECT_EQ(l.spec().experts[1].name, "ep");
  EXPECT_EQ(l.axisSize("etp"), 2);
  EXPECT_EQ(l.axisSize("ep"), 8);
  EXPECT_EQ(l.axisSize("edp"), 1);
  for (int64_t r = 0; r < 32; ++r) {
    EXPECT_EQ(l.coord(r, "etp"), l.coord(r, "tp"));
    EXPECT_EQ(l.coord(r, "ep"), l.coord(r, "cp") + 2 * l.coord(r, "dp"));
  }
  // Rank 11 = tp 1, cp 1, dp 2, pp 0: ep 5.
  EXPECT_EQ(l.group(11, {"ep"}), (Ranks{1, 3, 5, 7, 9, 11, 13, 15}));
  EXPECT_EQ(l.group(11, {"etp", "ep"}),
            (Ranks{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(l.group(11, {"etp"}), (Ranks{10, 11}));
  EXPECT_EQ(l.groupSize({"etp", "ep"}), 16);
  // 8 experts, one per ep coordinate, held in two slices.
  EXPECT_EQ(l.localExperts(11, 8), (std::pair<int64_t, int64_t>{5, 1}));
  EXPECT_EQ(l.expertHolders(11, 5, 8), (Ranks{10, 11}));
  EXPECT_EQ(l.expertHolders(27, 0, 8), (Ranks{16, 17}));
  // A placement's slots on EP coordinate 5: its two etp slices.
  EXPECT_EQ(l.epHolders(11, 5), (Ranks{10, 11}));
  EXPECT_EQ(l.epHolders(27, 0), (Ranks{16, 17}));
  EXPECT_EQ(l.epHolders(11, 8), (Ranks{}));
  expectConsistent(l);
}

TEST(MeshLayoutFold, Ep8Edp2) {
  MeshLayout l = folded(1, 8, 2);
  EXPECT_EQ(l.axisSize("edp"), 2);
  EXPECT_FALSE(l.hasAxis("etp"));
  for (int64_t r = 0; r < 32; ++r) {
    int64_t i = l.coord(r, "tp") + 2 * l.coord(r, "cp") + 4 * l.coord(r, "dp");
    EXPECT_EQ(l.coord(r, "ep"), i % 8);
    EXPECT_EQ(l.coord(r, "edp"), i / 8);
  }
  // The EP group of rank 11 (i = 11, edp 1) is its EDP replica.
  EXPECT_EQ(l.group(11, {"ep"}), (Ranks{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(l.group(3, {"ep"}), (Ranks{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(l.group(11, {"edp"}), (Ranks{3, 11}));
  EXPECT_EQ(l.expertHolders(11, 2, 8), (Ranks{10}));
  EXPECT_EQ(l.expertHolders(3, 2, 8), (Ranks{2}));
  EXPECT_EQ(l.expertHolders(19, 2, 8), (Ranks{18}));
  EXPECT_EQ(l.epHolders(11, 2), (Ranks{10}));
  expectConsistent(l);
}

TEST(MeshLayoutFold, Ep4Etp2Edp2InEveryOrder) {
  for (const char *order : {"etp,ep,edp", "ep,etp,edp", "edp,ep,etp",
                            "ep,edp,etp", "etp,edp,ep", "edp,etp,ep"}) {
    MeshLayout l = folded(2, 4, 2, order);
    EXPECT_EQ(l.groupSize({"etp", "ep"}), 8) << order;
    expectConsistent(l);
    // Each expert of 8 has two holders in every rank's etp x ep group, and
    // they hold it as their local experts.
    for (int64_t r = 0; r < 32; ++r)
      for (int64_t e = 0; e < 8; ++e) {
        Ranks holders = l.expertHolders(r, e, 8);
        ASSERT_EQ(holders.size(), 2u);
        for (size_t m = 0; m < 2; ++m) {
          EXPECT_EQ(l.coord(holders[m], "etp"), int64_t(m));
          EXPECT_EQ(l.coord(holders[m], "edp"), l.coord(r, "edp"));
          EXPECT_EQ(l.stageOf(holders[m]), l.stageOf(r));
          auto [first, count] = l.localExperts(holders[m], 8);
          EXPECT_TRUE(e >= first && e < first + count);
        }
      }
  }
}

TEST(MeshLayoutFold, SwappedAttentionOrder) {
  // Stages are not contiguous (pp second): the fold follows tp, cp, dp.
  MeshLayout l = folded(2, 8, 1, "etp,ep,edp", "tp,pp,cp,dp");
  for (int64_t r = 0; r < 32; ++r) {
    EXPECT_EQ(l.coord(r, "etp"), l.coord(r, "tp"));
    EXPECT_EQ(l.coord(r, "ep"), l.coord(r, "cp") + 2 * l.coord(r, "dp"));
  }
  expectConsistent(l);
}

TEST(MeshLayoutFold, DefaultEpIsTheRest) {
  EXPECT_EQ(folded(2, 0, 1).axisSize("ep"), 8);
  EXPECT_EQ(folded(2, 0, 2).axisSize("ep"), 4);
  EXPECT_EQ(folded(1, 0, 1).axisSize("ep"), 16);
  // Size-1 expert axes stay out of the plan: today's plans are unchanged.
  EXPECT_EQ(folded(1, 0, 1).spec().experts.size(), 2u);
}

TEST(MeshLayoutFold, Errors) {
  EXPECT_EQ(foldedError(2, 8, 2),
            "plan rule 'mesh-size': etp*ep*edp = 2*8*2 = 32 must equal "
            "tp*cp*dp = 2*2*4 = 16: try --ep 8 --etp 2 --edp 1 or --ep 8 "
            "--etp 1 --edp 2");
  EXPECT_EQ(foldedError(3, 0, 1), "plan rule 'mesh-size': etp*edp = 3*1 must "
                                  "divide tp*cp*dp = 2*2*4 = 16");
  EXPECT_EQ(foldedError(1, 5, 1), "plan rule 'mesh-size': etp*ep*edp = 1*5*1 "
                                  "= 5 must equal tp*cp*dp = 2*2*4 = 16");
  EXPECT_EQ(foldedError(0, 8, 1), "plan rule 'axis-size': axis 'etp' has size "
                                  "0, but sizes must be >= 1");
  EXPECT_EQ(foldedError(2, 8, 1, "etp,xp,edp"),
            "plan rule 'fold': expert order 'etp,xp,edp' names 'xp', which is "
            "not an expert axis (expected a permutation of etp,ep,edp)");
  EXPECT_EQ(foldedError(2, 8, 1, "etp,ep,ep"),
            "plan rule 'duplicate-axis': expert order 'etp,ep,ep' names 'ep' "
            "twice");
  EXPECT_EQ(foldedError(2, 8, 1, "etp,ep"),
            "plan rule 'fold': expert order 'etp,ep' lacks 'edp' (expected a "
            "permutation of etp,ep,edp)");

  // Written by hand: axes that overlap without being folded over the same
  // attention axes; folded axes of the wrong sizes.
  PlanSpec spec = seedSpec();
  spec.experts = {
      {"etp", 2, {"tp"}}, {"ep", 8, {"tp", "cp", "dp"}}, {"pp", 2, {"pp"}}};
  std::string error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'fold'");
  EXPECT_CONTAINS(error, "'tp' is named twice");
  spec.experts = {{"etp", 4, {"tp", "cp", "dp"}},
                  {"ep", 8, {"tp", "cp", "dp"}},
                  {"pp", 1, {"pp"}}};
  error = createError(spec);
  EXPECT_EQ(error, "plan rule 'mesh-size': expert axes etp,ep, folded over "
                   "tp,cp,dp, multiply to 32, but tp,cp,dp multiply to 16");
  spec.experts = {
      {"ep", 16, {"tp", "cp", "dp"}}, {"pp", 2, {"pp"}}, {"x", 1, {"pp"}}};
  error = createError(spec);
  EXPECT_CONTAINS(error, "plan rule 'pp-groups'");
}
