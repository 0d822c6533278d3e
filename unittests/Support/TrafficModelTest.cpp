//===- TrafficModelTest.cpp - analytic traffic (docs/design.md §5) ------===//

#include "meshfold/Support/TrafficModel.h"

#include <gtest/gtest.h>

using namespace meshfold;

namespace {
MeshLayout layoutFor(const std::string &order, int64_t tp, int64_t cp,
                     int64_t dp, int64_t pp) {
  PlanSpec spec;
  std::string error;
  EXPECT_TRUE(
      PlanSpec::fromFlags(tp, cp, dp, pp, tp * cp * dp, order, 8, spec, &error))
      << error;
  return *MeshLayout::create(spec, &error);
}

/// The seed model: d 64, 4 KV heads of 8, 32 experts top-2, 8 layers.
TrafficModelInput seedModel() { return {64, 4, 8, 32, 2, 8, true}; }

const TrafficRow &row(const std::vector<TrafficRow> &rows,
                      const std::string &name) {
  for (const TrafficRow &r : rows)
    if (r.collective == name)
      return r;
  static TrafficRow none;
  ADD_FAILURE() << "no row " << name;
  return none;
}
} // namespace

// docs/design.md §5: EP's IB traffic under uniform routing is
// 2 * (1 - (16/32)*(15/31)) * (T/4) * d ~ 0.38*T*d per GPU per layer (both
// ways); TP's all-gather and reduce-scatter send T/4*d each over NVLink.
TEST(TrafficModel, SeedPlan) {
  MeshLayout layout = layoutFor("tp,cp,dp,pp", 2, 2, 4, 2);
  std::vector<TrafficRow> rows = analyticTraffic(layout, seedModel());
  double expected = 2 * (1 - (16.0 / 32) * (15.0 / 31)) * 0.25;
  EXPECT_NEAR(row(rows, "dispatch").ib + row(rows, "combine").ib, expected,
              1e-12);
  EXPECT_NEAR(expected, 0.379, 0.001);
  EXPECT_DOUBLE_EQ(row(rows, "all_gather").nvlink, 0.25);
  EXPECT_DOUBLE_EQ(row(rows, "all_gather").ib, 0.0);
  EXPECT_DOUBLE_EQ(row(rows, "reduce_scatter").nvlink, 0.25);
  // One CP swap of K and V for T/2 tokens, 2 KV heads of 8: 2*0.5*16/64,
  // and their positions (i64, two f32-sized elements): 0.5*2/64.
  EXPECT_DOUBLE_EQ(row(rows, "kv_ring").nvlink, 0.25 + 1.0 / 64);
  // PP: the T/4*d slice once per 4 layers, by half the GPUs, over IB.
  EXPECT_DOUBLE_EQ(row(rows, "pp").ib, 0.25 / 4 / 2);
  EXPECT_DOUBLE_EQ(row(rows, "pp").nvlink, 0.0);
  // One tensor as both key and value (MLA's latent): the ring passes it
  // once, and nothing else changes.
  TrafficModelInput shared = seedModel();
  shared.kvCopies = 1;
  std::vector<TrafficRow> once = analyticTraffic(layout, shared);
  EXPECT_DOUBLE_EQ(row(once, "kv_ring").nvlink, 0.125 + 1.0 / 64);
  EXPECT_DOUBLE_EQ(row(once, "all_gather").nvlink, 0.25);
  EXPECT_DOUBLE_EQ(row(once, "dispatch").ib, row(rows, "dispatch").ib);
}

// The last layer narrowed to each request's last row (1 of T = 64): over a
// stage's 4 of 8 layers, 1/8 of the GPU-layers have no reduce-scatter and
// 1/64 of a layer's dispatch and combine; the all-gather and the ring stay.
TEST(TrafficModel, NarrowedLastLayer) {
  MeshLayout layout = layoutFor("tp,cp,dp,pp", 2, 2, 4, 2);
  TrafficModelInput narrowed = seedModel();
  narrowed.survivingRows = 1.0 / 64;
  std::vector<TrafficRow> whole = analyticTraffic(layout, seedModel());
  std::vector<TrafficRow> rows = analyticTraffic(layout, narrowed);
  EXPECT_DOUBLE_EQ(row(rows, "reduce_scatter").nvlink, 0.25 * 7 / 8);
  EXPECT_DOUBLE_EQ(row(rows, "dispatch").ib,
                   row(whole, "dispatch").ib * (7 + 1.0 / 64) / 8);
  EXPECT_DOUBLE_EQ(row(rows, "combine").nvlink,
                   row(whole, "combine").nvlink * (7 + 1.0 / 64) / 8);
  EXPECT_DOUBLE_EQ(row(rows, "all_gather").nvlink, 0.25);
  EXPECT_DOUBLE_EQ(row(rows, "kv_ring").nvlink, row(whole, "kv_ring").nvlink);
  EXPECT_DOUBLE_EQ(row(rows, "pp").ib, row(whole, "pp").ib);
}

// Swapping PP and DP spreads a stage over four nodes: 3/4 of a token's
// candidate experts are across IB and EP's IB traffic rises to ~0.67*T*d;
// the PP send moves onto NVLink.
TEST(TrafficModel, SwappedOrder) {
  MeshLayout layout = layoutFor("tp,cp,pp,dp", 2, 2, 4, 2);
  std::vector<TrafficRow> rows = analyticTraffic(layout, seedModel());
  double pNone = (24.0 * 23) / (32.0 * 31);
  double expected = 2 * 3 * (1 - pNone) * 0.25;
  EXPECT_NEAR(row(rows, "dispatch").ib + row(rows, "combine").ib, expected,
              1e-12);
  EXPECT_NEAR(expected, 0.665, 0.001);
  EXPECT_DOUBLE_EQ(row(rows, "pp").ib, 0.0);
  EXPECT_GT(row(rows, "pp").nvlink, 0.0);
  // The seed order is faster at the same sizes.
  MeshLayout seed = layoutFor("tp,cp,dp,pp", 2, 2, 4, 2);
  EXPECT_LT(
      trafficSeconds(seed, analyticTraffic(seed, seedModel()), 4096, 64, 2),
      trafficSeconds(layout, rows, 4096, 64, 2));
}

// Flat dispatch sends a row per destination GPU: more IB than through relays.
TEST(TrafficModel, FlatCostsMoreIB) {
  MeshLayout layout = layoutFor("tp,cp,dp,pp", 2, 2, 4, 2);
  TrafficModelInput flat = seedModel();
  flat.hierarchical = false;
  EXPECT_GT(row(analyticTraffic(layout, flat), "dispatch").ib,
            row(analyticTraffic(layout, seedModel()), "dispatch").ib);
}

// docs/design.md §6: a decode step's rows per CP rank are its batch dealt
// over CP (one padding row for a dummy step), padded to a multiple of TP.
TEST(TrafficModel, DecodeStepRows) {
  MeshLayout seed = layoutFor("tp,cp,dp,pp", 2, 2, 4, 2);
  EXPECT_EQ(decodeStepRows(seed, 0), 2);
  EXPECT_EQ(decodeStepRows(seed, 1), 2);
  EXPECT_EQ(decodeStepRows(seed, 4), 2);
  EXPECT_EQ(decodeStepRows(seed, 5), 4);
  MeshLayout cp4 = layoutFor("tp,cp,dp,pp", 1, 4, 4, 2);
  EXPECT_EQ(decodeStepRows(cp4, 9), 3);
  MeshLayout tp8 = layoutFor("tp,cp,dp,pp", 8, 1, 2, 2);
  EXPECT_EQ(decodeStepRows(tp8, 3), 8);
}

// Pass-Q on the seed plan (8 query heads of 8, 4 per TP rank): one ring
// step of 2 rows x 4 heads x (2 x 8 + 1) floats and 2 positions, one of
// the 2 x 4 x 8 outputs and positions back: 832 bytes per layer, whatever
// the cache holds. Pass-KV moves the rank's share of the cache instead:
// 20 positions over CP 2, 2 KV heads per TP rank of K and V, and positions.
TEST(TrafficModel, PassQAndPassKV) {
  MeshLayout seed = layoutFor("tp,cp,dp,pp", 2, 2, 4, 2);
  EXPECT_DOUBLE_EQ(passQBytes(seed, 8, 8, 2),
                   2 * 4 * 17 * 4 + 2 * 8 + 2 * 4 * 8 * 4 + 2 * 8);
  EXPECT_DOUBLE_EQ(passQBytes(seed, 8, 8, 2), 832);
  EXPECT_DOUBLE_EQ(passKVBytes(seed, 4, 8, 20, 2), 10 * 2 * 2 * 8 * 4 + 10 * 8);
  // One tensor as both key and value (MLA's latent): half the floats.
  EXPECT_DOUBLE_EQ(passKVBytes(seed, 4, 8, 20, 1), 10 * 2 * 1 * 8 * 4 + 10 * 8);
  // TP 4 over 4 KV heads: one KV head per rank. Without CP nothing moves.
  MeshLayout tp4cp2 = layoutFor("tp,cp,dp,pp", 4, 2, 2, 2);
  EXPECT_DOUBLE_EQ(passKVBytes(tp4cp2, 4, 8, 20, 2),
                   10 * 1 * 2 * 8 * 4 + 10 * 8);
  MeshLayout tp8 = layoutFor("tp,cp,dp,pp", 8, 1, 2, 2);
  EXPECT_DOUBLE_EQ(passQBytes(tp8, 8, 8, 8), 0);
  EXPECT_DOUBLE_EQ(passKVBytes(tp8, 4, 8, 20, 2), 0);
}

// All-reduces on TP send 2 c (TP-1) / TP per GPU for c elements each. The
// seed plan (TP2 x CP2 x DP4 x PP2), T = 64, one request per replica
// (1/64 of T), V = 512:
// - norms over the whole query and key projections (OLMoE): one sum per row
//   each, on the T/CP = 32 rows of a layer: 2 * 32 elements, 1/64 of T*d;
// - the narrowed last layer (1/8 of the GPU-layers): its output row (d
//   elements) for 1/CP of the requests per GPU, and the query's sum on it
//   beside the key's whole;
// - the head: the last row and its flag (d + 1) per request on every rank
//   of the last stage, and V/TP logits from TP rank 1 to 0 (the gather).
TEST(TrafficModel, AllReducesAndTheHead) {
  MeshLayout layout = layoutFor("tp,cp,dp,pp", 2, 2, 4, 2);
  TrafficModelInput plain = seedModel();
  EXPECT_EQ(analyticTraffic(layout, plain).size(), 6u);
  TrafficModelInput norms = plain;
  norms.projNorms = true;
  EXPECT_DOUBLE_EQ(row(analyticTraffic(layout, norms), "all_reduce").nvlink,
                   2.0 * 0.5 / 64);
  TrafficModelInput head = plain;
  head.headRows = 1.0 / 64;
  head.vocab = 512;
  std::vector<TrafficRow> rows = analyticTraffic(layout, head);
  EXPECT_DOUBLE_EQ(row(rows, "all_reduce").nvlink, (1.0 / 64) * 65 / 64 / 8);
  EXPECT_DOUBLE_EQ(row(rows, "gather").nvlink, 0.5 * (1.0 / 64) * 256 / 64 / 8);
  EXPECT_DOUBLE_EQ(row(rows, "all_reduce").ib, 0.0);
  TrafficModelInput all = head;
  all.projNorms = true;
  all.survivingRows = 1.0 / 64;
  double narrowed = 0.5 / 64 + (0.5 / 64 + 0.5) / 64;
  EXPECT_DOUBLE_EQ(row(analyticTraffic(layout, all), "all_reduce").nvlink,
                   7.0 / 8 * 2 * 0.5 / 64 + narrowed / 8 +
                       (1.0 / 64) * 65 / 64 / 8);
  // Without TP nothing is all-reduced or gathered.
  MeshLayout noTP = layoutFor("tp,cp,dp,pp", 1, 2, 8, 2);
  EXPECT_EQ(analyticTraffic(noTP, all).size(), 6u);
}
