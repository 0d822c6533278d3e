//===- TraceTest.cpp - Tests for the token trace's log and routing hooks --===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//

#include "mfrt/program/Trace.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <fstream>

using namespace mfrt;

namespace {

meshfold::MeshLayout seedLayout() {
  meshfold::PlanSpec spec;
  std::string error;
  EXPECT_TRUE(meshfold::PlanSpec::fromFlags(2, 2, 4, 2, 16, "tp,cp,dp,pp", 8,
                                            spec, &error))
      << error;
  std::optional<meshfold::MeshLayout> layout =
      meshfold::MeshLayout::create(spec, &error);
  EXPECT_TRUE(layout.has_value()) << error;
  return *layout;
}

mfrt_trace_hop hop(int64_t layer, int64_t op, mfrt_op_kind kind, int from,
                   int to) {
  return mfrt_trace_hop{layer, op, int32_t(kind), from, to};
}

// docs/design.md §4, hops 2-4 of layer 1, as the runtime records them (in any
// order, with a duplicate): the counts after each comm op.
TEST(TraceLog, SeedLayerOne) {
  std::vector<mfrt_trace_hop> hops = {hop(0, 4, MFRT_OP_COMBINE, 3, 11),
                                      hop(0, 0, MFRT_OP_ALL_GATHER, 11, 10),
                                      hop(0, 3, MFRT_OP_DISPATCH, 3, 2),
                                      hop(0, 1, MFRT_OP_KV_RING, 11, 9),
                                      hop(0, 1, MFRT_OP_KV_RING, 10, 8),
                                      hop(0, 2, MFRT_OP_REDUCE_SCATTER, 10, 11),
                                      hop(0, 3, MFRT_OP_DISPATCH, 11, 3),
                                      hop(0, 3, MFRT_OP_DISPATCH, 11, 13),
                                      hop(0, 4, MFRT_OP_COMBINE, 2, 3),
                                      hop(0, 4, MFRT_OP_COMBINE, 13, 11),
                                      hop(0, 3, MFRT_OP_DISPATCH, 11, 3),
                                      hop(3, 5, MFRT_OP_PP, 11, 27)};
  TraceLog log = buildTraceLog(seedLayout(), hops, 11, {10, 11});
  ASSERT_EQ(log.steps.size(), 6u);
  EXPECT_EQ(log.steps[0].what, "layer 1 all_gather");
  EXPECT_EQ(log.steps[0].gpus, 2);
  EXPECT_EQ(log.steps[0].added, std::vector<int>({10}));
  EXPECT_EQ(log.steps[2].gpus, 4);
  EXPECT_EQ(log.steps[2].ops, 3);
  EXPECT_EQ(log.steps[2].crossings, 0);
  // The dispatch goes 11=>3 before 3->2 (the order the data went).
  const TraceStep &d = log.steps[3];
  ASSERT_EQ(d.hops.size(), 3u);
  EXPECT_EQ(d.hops[0].from, 11);
  EXPECT_EQ(d.hops.back().from, 3);
  EXPECT_EQ(d.added, std::vector<int>({2, 3, 13}));
  EXPECT_EQ(d.crossings, 1);
  EXPECT_EQ(log.steps[4].gpus, 7);
  EXPECT_EQ(log.steps[4].crossings, 2);
  EXPECT_EQ(log.steps[4].ep, 2);
  EXPECT_EQ(log.steps[4].ops, 5);
  EXPECT_EQ(log.steps[5].what, "after layer 4 pp");
  EXPECT_EQ(log.gpus, 8);
  EXPECT_EQ(log.crossings, 3);
  EXPECT_EQ(log.pp, 1);
  EXPECT_EQ(log.ops, 6);
}

// Both experts on the token's own GPU: the dispatch and combine still count
// as comm ops it took part in, with nothing moved.
TEST(TraceLog, LocalExpertsCountAsOpsWithoutMoves) {
  std::vector<mfrt_trace_hop> hops = {hop(0, 3, MFRT_OP_DISPATCH, 11, 11),
                                      hop(0, 4, MFRT_OP_COMBINE, 11, 11)};
  TraceLog log = buildTraceLog(seedLayout(), hops, 11, {});
  ASSERT_EQ(log.steps.size(), 2u);
  EXPECT_EQ(log.ops, 2);
  EXPECT_EQ(log.gpus, 1);
  EXPECT_EQ(log.crossings, 0);
  EXPECT_TRUE(log.steps[0].added.empty());
}

std::string writeFile(const std::string &text) {
  std::string path =
      ::testing::TempDir() + "routing-" + std::to_string(std::rand()) + ".txt";
  std::ofstream(path) << text;
  return path;
}

TEST(RoutingFile, ReadsLayersFromOne) {
  std::map<int64_t, std::vector<int64_t>> forced;
  std::string error;
  std::string path = writeFile("# comment\n1: 5 27\n\n8: 10 30  # last\n");
  ASSERT_TRUE(parseRoutingFile(path, 8, 32, 2, forced, &error)) << error;
  EXPECT_EQ(forced.size(), 2u);
  EXPECT_EQ(forced[0], std::vector<int64_t>({5, 27}));
  EXPECT_EQ(forced[7], std::vector<int64_t>({10, 30}));
  std::remove(path.c_str());
}

TEST(RoutingFile, NamesTheLineAndRule) {
  struct Case {
    const char *text, *message;
  } cases[] = {
      {"0: 1 2\n", ":1: layer 0 is outside the model's layers 1..8"},
      {"1: 1 2 3\n", ":1: layer 1 lists 3 experts, but the model routes each "
                     "token to top_k = 2"},
      {"1: 1 -2\n", ":1: expert '-2' is not an expert id 0..31"},
      {"2: 4 4\n", ":1: expert 4 is chosen twice"},
      {"1: 1 2\n1: 3 4\n", ":2: layer 1 is given twice"},
      {"1 2 3\n", ":1: expected 'LAYER: E1 .. E2' (layers from 1)"},
  };
  for (const Case &c : cases) {
    std::map<int64_t, std::vector<int64_t>> forced;
    std::string error, path = writeFile(c.text);
    EXPECT_FALSE(parseRoutingFile(path, 8, 32, 2, forced, &error)) << c.text;
    EXPECT_NE(error.find(c.message), std::string::npos)
        << "got: " << error << "\nwant: " << c.message;
    std::remove(path.c_str());
  }
}

// Random routing: k distinct experts, the same for the same token, and
// uniform: over many tokens every expert is chosen about k/n of the time.
TEST(RandomRouting, DistinctDeterministicUniform) {
  const int64_t n = 32, k = 2, tokens = 20000;
  std::vector<int64_t> counts(static_cast<size_t>(n), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t e[2], again[2];
    randomExperts(7, t % 5, t, t % 3, n, k, e);
    randomExperts(7, t % 5, t, t % 3, n, k, again);
    ASSERT_NE(e[0], e[1]);
    ASSERT_EQ(e[0], again[0]);
    ASSERT_EQ(e[1], again[1]);
    for (int64_t j = 0; j < k; ++j) {
      ASSERT_GE(e[j], 0);
      ASSERT_LT(e[j], n);
      ++counts[size_t(e[j])];
    }
  }
  // Expected 1250 per expert; 5 standard deviations is about 170.
  for (int64_t c : counts)
    EXPECT_NEAR(double(c), double(tokens * k) / double(n), 180.0);
}

} // namespace
