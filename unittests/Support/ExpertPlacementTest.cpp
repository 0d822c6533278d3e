//===- ExpertPlacementTest.cpp - Tests for expert placements --------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Support/ExpertPlacement.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>

using namespace meshfold;

namespace {

TEST(ExpertPlacementTest, ContiguousIsTheBlockPlacement) {
  ExpertPlacement p = ExpertPlacement::contiguous(8, 4);
  EXPECT_EQ(p.slots, 2);
  EXPECT_EQ(p.experts, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(p.check(), "");
  EXPECT_EQ(p.replicasOf(5), (std::vector<int64_t>{5}));
  EXPECT_EQ(p.coordOf(5), 2);
  EXPECT_EQ(p.redundant(), 0);
  EXPECT_EQ(p.rankRows({1, 1, 2, 2, 3, 3, 4, 4}),
            (std::vector<double>{2, 4, 6, 8}));
}

TEST(ExpertPlacementTest, ReplicasSplitTheirRows) {
  ExpertPlacement p;
  p.ep = 2;
  p.numExperts = 3;
  p.slots = 2;
  p.experts = {0, 1, 0, 2};
  EXPECT_EQ(p.check(), "");
  EXPECT_EQ(p.replicasOf(0), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(p.rankRows({10, 1, 3}), (std::vector<double>{6, 8}));
}

TEST(ExpertPlacementTest, CheckNamesTheRule) {
  ExpertPlacement p;
  p.ep = 2;
  p.numExperts = 4;
  p.slots = 2;
  p.experts = {0, 1, 2, 7};
  EXPECT_NE(p.check().find("expert 7"), std::string::npos) << p.check();
  p.experts = {0, 0, 1, 2};
  EXPECT_NE(p.check().find("twice"), std::string::npos) << p.check();
  p.experts = {0, 1, 2, 1};
  EXPECT_NE(p.check().find("no replica of expert 3"), std::string::npos)
      << p.check();
  p.experts = {0, 1, 2};
  EXPECT_NE(p.check(), "");
}

TEST(ExpertPlacementTest, Rules) {
  EXPECT_EQ(placementRule(32, 16, 16), "");
  EXPECT_NE(placementRule(32, 16, 4).find("must divide"), std::string::npos);
  EXPECT_NE(placementRule(8, 4, -4).find("0 or more"), std::string::npos);
  EXPECT_NE(placementRule(8, 4, 28).find("at most one replica"),
            std::string::npos);
  EXPECT_EQ(placementRule(8, 4, 24), "");
}

// A Zipf-like load (weight 1/r): 64 experts on 16 ranks, with EP/4 = 4
// replicas rounded up to what equal slots allow (EP | E + R): R = 16, 48.
TEST(ExpertPlacementTest, BalancesAZipfLoad) {
  std::vector<double> rows;
  for (int r = 1; r <= 64; ++r)
    rows.push_back(1000.0 / r);
  ExpertPlacement before = ExpertPlacement::contiguous(64, 16);
  for (int64_t redundant : {0, 16, 48}) {
    ExpertPlacement p = balanceExperts(rows, 16, redundant);
    ASSERT_EQ(p.check(), "") << redundant;
    EXPECT_EQ(p.redundant(), redundant);
    double was = maxOverMean(before.rankRows(rows)),
           now = maxOverMean(p.rankRows(rows));
    EXPECT_LT(now, was) << redundant;
    if (redundant >= 16)
      EXPECT_LT(now, 1.1) << redundant;
  }
}

// Every expert at most once per rank, even where the greedy choice leaves
// the last free slots on ranks that hold the expert already.
TEST(ExpertPlacementTest, NeverTwiceOnARank) {
  for (int64_t ep : {2, 3, 4, 8})
    for (int64_t experts : {4, 6, 8, 12, 16})
      for (int64_t redundant = 0; redundant <= experts * (ep - 1);
           ++redundant) {
        if (!placementRule(experts, ep, redundant).empty())
          continue;
        std::vector<double> rows;
        for (int64_t e = 0; e < experts; ++e)
          rows.push_back(double((e * 37) % 11 + (e == 1 ? 100 : 0)));
        ExpertPlacement p = balanceExperts(rows, ep, redundant);
        EXPECT_EQ(p.check(), "")
            << ep << " ranks, " << experts << " experts, " << redundant;
      }
}

// On two nodes of 4 EP ranks, the replicas of an expert spread over both
// nodes; a row stays on its node where the expert has as many replicas on
// each.
TEST(ExpertPlacementTest, ReplicasSpreadOverNodes) {
  std::vector<double> rows(16, 1.0);
  rows[3] = 40;
  rows[9] = 20;
  const std::vector<int64_t> nodeOf = {0, 0, 0, 0, 1, 1, 1, 1};
  ExpertPlacement p = balanceExperts(rows, 8, 8, nodeOf);
  ASSERT_EQ(p.check(), "");
  std::vector<int64_t> nodeOfSlot;
  for (int64_t s = 0; s < int64_t(p.experts.size()); ++s)
    nodeOfSlot.push_back(nodeOf[size_t(p.coordOf(s))]);
  for (int64_t e : {3, 9}) {
    std::vector<int64_t> slots = p.replicasOf(e), perNode(2, 0);
    for (int64_t s : slots)
      ++perNode[size_t(nodeOfSlot[size_t(s)])];
    EXPECT_LE(std::abs(perNode[0] - perNode[1]), 1) << "expert " << e;
    std::vector<int64_t> local = localReplicas(slots, nodeOfSlot, 1);
    if (perNode[0] == perNode[1]) {
      EXPECT_EQ(int64_t(local.size()), perNode[1]) << "expert " << e;
      for (int64_t s : local)
        EXPECT_EQ(nodeOfSlot[size_t(s)], 1);
    } else {
      EXPECT_EQ(local, slots) << "expert " << e;
    }
  }
  EXPECT_LT(maxOverMean(p.rankRows(rows)),
            maxOverMean(ExpertPlacement::contiguous(16, 8).rankRows(rows)) / 2);
}

TEST(ExpertPlacementTest, LocalReplicasOnlyWhereEveryNodeHasAsMany) {
  const std::vector<int64_t> nodeOfSlot = {0, 0, 1, 1};
  EXPECT_EQ(localReplicas({0, 2}, nodeOfSlot, 1), (std::vector<int64_t>{2}));
  EXPECT_EQ(localReplicas({0, 1, 2}, nodeOfSlot, 1),
            (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(localReplicas({0, 1}, nodeOfSlot, 1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(localReplicas({3}, {0, 0, 0, 0}, 0), (std::vector<int64_t>{3}));
}

TEST(ExpertPlacementTest, MaxOverMean) {
  EXPECT_DOUBLE_EQ(maxOverMean({1, 1, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(maxOverMean({4, 0, 0, 0}), 4.0);
  EXPECT_DOUBLE_EQ(maxOverMean({0, 0}), 1.0);
  EXPECT_DOUBLE_EQ(maxOverMean({}), 1.0);
}

} // namespace
