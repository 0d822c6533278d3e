//===- KVTransferTest.cpp - Tests for the K/V transfer between meshes -----===//

#include "meshfold/Support/KVTransfer.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

using namespace meshfold;

namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

MeshLayout fromFlags(int64_t tp, int64_t cp, int64_t dp, int64_t pp,
                     const std::string &order = "tp,cp,dp,pp") {
  PlanSpec spec;
  std::string error;
  EXPECT_TRUE(PlanSpec::fromFlags(tp, cp, dp, pp, 0, order, 8, spec, &error))
      << error;
  std::optional<MeshLayout> layout = MeshLayout::create(spec, &error);
  EXPECT_TRUE(layout.has_value()) << error;
  return *layout;
}

MeshLayout seed() { return fromFlags(2, 2, 4, 2); }

/// The seed model's cache: 8 layers, 4 KV heads of 8.
KVTransferInput seedModel(int64_t promptLength) {
  KVTransferInput in;
  in.numLayers = 8;
  in.numKVHeads = 4;
  in.headDim = 8;
  in.promptLength = promptLength;
  return in;
}

bool holds(const MeshLayout &mesh, int64_t rank, const KVTransferInput &in,
           int64_t layer, int64_t head, int64_t position) {
  if (mesh.stageOfLayer(layer, in.numLayers) != mesh.stageOf(rank))
    return false;
  auto [first, count] = mesh.kvHeadRange(rank, in.numKVHeads);
  if (head < first || head >= first + count)
    return false;
  for (auto [begin, end] : mesh.promptPositions(rank, in.promptLength))
    if (position >= begin && position < end)
      return true;
  return false;
}

/// Checks the plan element by element: every decode rank of the decode
/// replica gets each (layer, head, position) it holds exactly once, from a
/// rank of the prefill replica that holds it, and nothing else; the total is
/// the analytic minimum.
void checkPlan(const MeshLayout &prefill, const MeshLayout &decode,
               const KVTransferInput &in) {
  std::vector<KVBlock> blocks;
  std::string error;
  ASSERT_TRUE(planKVTransfer(prefill, decode, in, blocks, &error)) << error;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, int> got;
  int64_t elements = 0, lastLayer = 0;
  for (const KVBlock &b : blocks) {
    EXPECT_GE(b.layer, lastLayer) << "blocks go in layer order";
    lastLayer = b.layer;
    EXPECT_EQ(prefill.coord(b.from, "dp"), in.prefillReplica);
    EXPECT_EQ(decode.coord(b.to, "dp"), in.decodeReplica);
    elements += b.elements(in.headDim);
    for (int64_t h = b.headBegin; h < b.headEnd; ++h)
      for (int64_t p = b.positionBegin; p < b.positionEnd; ++p) {
        EXPECT_TRUE(holds(prefill, b.from, in, b.layer, h, p))
            << "rank " << b.from << " sends layer " << b.layer << " head " << h
            << " position " << p << " it does not hold";
        ++got[{b.to, b.layer, h, p}];
      }
  }
  int64_t needed = 0;
  for (int64_t d = 0; d < decode.numDevices(); ++d)
    for (int64_t l = 0; l < in.numLayers; ++l)
      for (int64_t h = 0; h < in.numKVHeads; ++h)
        for (int64_t p = 0; p < in.promptLength; ++p) {
          bool wants = decode.coord(d, "dp") == in.decodeReplica &&
                       holds(decode, d, in, l, h, p);
          auto it = got.find({d, l, h, p});
          int times = it == got.end() ? 0 : it->second;
          EXPECT_EQ(times, wants ? 1 : 0)
              << "decode rank " << d << " layer " << l << " head " << h
              << " position " << p;
          needed += wants ? 1 : 0;
        }
  EXPECT_EQ(elements, in.kvCopies * needed * in.headDim);
  EXPECT_EQ(elements, kvTransferMinimumElements(decode, in));
}

TEST(KVPlacement, KVHeadRanges) {
  // Seed plan: 4 KV heads over TP 2, two each.
  MeshLayout s = seed();
  EXPECT_EQ(s.kvHeadRange(0, 4), std::make_pair(int64_t(0), int64_t(2)));
  EXPECT_EQ(s.kvHeadRange(1, 4), std::make_pair(int64_t(2), int64_t(2)));
  // TP 8 over 4 KV heads: each head shared by two TP ranks.
  MeshLayout tp8 = fromFlags(8, 1, 1, 1);
  for (int64_t t = 0; t < 8; ++t)
    EXPECT_EQ(tp8.kvHeadRange(t, 4), std::make_pair(t / 2, int64_t(1)));
  // TP 3 neither divides 4 nor is a multiple of it.
  MeshLayout tp3 = fromFlags(3, 1, 1, 1);
  EXPECT_EQ(tp3.kvHeadRange(0, 4).first, -1);
  EXPECT_EQ(s.kvHeadRange(32, 4).first, -1);
}

TEST(KVPlacement, ZigzagPromptPositions) {
  MeshLayout s = seed();
  // 37 tokens padded to 40 (2 * CP * TP = 8): chunks of 10; CP rank 0 holds
  // 0-9 and 30-36, CP rank 1 holds 10-29 (both TP ranks alike).
  EXPECT_EQ(s.promptPositions(0, 37), (Ranges{{0, 10}, {30, 37}}));
  EXPECT_EQ(s.promptPositions(1, 37), (Ranges{{0, 10}, {30, 37}}));
  EXPECT_EQ(s.promptPositions(2, 37), (Ranges{{10, 30}})); // chunks 1 and 2
  // One token: padded to 8, chunks of 2; only CP rank 0 holds anything.
  EXPECT_EQ(s.promptPositions(0, 1), (Ranges{{0, 1}}));
  EXPECT_EQ(s.promptPositions(2, 1), Ranges{});
  // CP 4 with TP 1: 13 tokens padded to 16, chunks of 2.
  MeshLayout cp4 = fromFlags(1, 4, 4, 2);
  EXPECT_EQ(cp4.promptPositions(0, 13), (Ranges{{0, 2}}));
  EXPECT_EQ(cp4.promptPositions(1, 13), (Ranges{{2, 4}, {12, 13}}));
  EXPECT_EQ(cp4.promptPositions(3, 13), (Ranges{{6, 10}}));
  // No CP: one range.
  EXPECT_EQ(fromFlags(1, 1, 32, 1).promptPositions(5, 9), (Ranges{{0, 9}}));
}

// The pairs of the disaggregation plan family: each changes every axis.
TEST(KVTransfer, SeedToTP2DP8) {
  for (int64_t t : {1, 7, 37, 64})
    for (int64_t r : {0, 3}) {
      KVTransferInput in = seedModel(t);
      in.prefillReplica = r;
      in.decodeReplica = 7 - r;
      checkPlan(seed(), fromFlags(2, 1, 8, 1), in);
    }
}

TEST(KVTransfer, SeedToTP4PP2ReplicatesHeads) {
  // TP 4 over 4 KV heads splits them one per rank; TP 8 replicates them.
  for (int64_t t : {5, 40}) {
    checkPlan(seed(), fromFlags(4, 1, 1, 2), seedModel(t));
    checkPlan(seed(), fromFlags(8, 1, 1, 2), seedModel(t));
  }
  KVTransferInput in = seedModel(16);
  EXPECT_EQ(kvTransferMinimumElements(fromFlags(8, 1, 1, 2), in),
            2 * 2 * 16 * 4 * 8 * 8);
}

TEST(KVTransfer, DP32ToCPPair) {
  // From one rank to a TP2 x CP2 x DP2 replica: the tokens re-split.
  for (int64_t t : {3, 37}) {
    KVTransferInput in = seedModel(t);
    in.prefillReplica = 17;
    in.decodeReplica = 1;
    checkPlan(fromFlags(1, 1, 32, 1), fromFlags(2, 2, 2, 1), in);
  }
}

TEST(KVTransfer, CP4ToPP4) {
  // TP1 x CP4 x DP4 x PP2 to four stages of one rank: layers re-split.
  for (int64_t t : {1, 13, 64}) {
    KVTransferInput in = seedModel(t);
    in.prefillReplica = 2;
    checkPlan(fromFlags(1, 4, 4, 2), fromFlags(1, 1, 1, 4), in);
  }
}

TEST(KVTransfer, FromReplicatedHeads) {
  // TP 8 on the prefill mesh replicates each head twice: a decode rank takes
  // each from one holder, the holders taking turns.
  KVTransferInput in = seedModel(20);
  checkPlan(fromFlags(8, 1, 4, 1), fromFlags(2, 2, 2, 2), in);
  std::vector<KVBlock> blocks;
  std::string error;
  ASSERT_TRUE(planKVTransfer(fromFlags(8, 1, 4, 1), fromFlags(8, 1, 1, 1), in,
                             blocks, &error));
  std::map<int64_t, int64_t> sent;
  for (const KVBlock &b : blocks)
    sent[b.from] += b.elements(in.headDim);
  EXPECT_EQ(sent.size(), 8u) << "every holder sends";
}

TEST(KVTransfer, SharedKeyAndValueMoveOnce) {
  // MLA's latent is the key and the value: one KV head, sent once. From the
  // seed plan (TP 2: each TP rank holds the one head) to TP2 x DP8.
  KVTransferInput in = seedModel(12);
  in.numKVHeads = 1;
  in.kvCopies = 1;
  checkPlan(seed(), fromFlags(2, 1, 8, 1), in);
  std::vector<KVBlock> blocks;
  std::string error;
  ASSERT_TRUE(
      planKVTransfer(seed(), fromFlags(2, 1, 8, 1), in, blocks, &error));
  for (const KVBlock &b : blocks)
    EXPECT_EQ(b.elements(in.headDim), (b.headEnd - b.headBegin) *
                                          (b.positionEnd - b.positionBegin) *
                                          in.headDim);
  // Each of the decode replica's 2 TP ranks holds the whole latent.
  EXPECT_EQ(kvTransferMinimumElements(fromFlags(2, 1, 8, 1), in),
            12 * 1 * 8 * 8 * 2);
}

TEST(KVTransfer, PoolsMachine) {
  // The seed plan's 32 GPUs, then TP2 x DP8's 16: nodes 0-3, then 4-5.
  MeshLayout machine = poolsMachine(seed(), fromFlags(2, 1, 8, 1));
  EXPECT_EQ(machine.numDevices(), 48);
  EXPECT_EQ(machine.numNodes(), 6);
  EXPECT_EQ(machine.node(31), 3);
  EXPECT_EQ(machine.node(32), 4);
  EXPECT_EQ(machine.localIndex(41), 1);
  EXPECT_EQ(machine.link(10, 40), LinkClass::IB);
  EXPECT_EQ(machine.link(40, 47), LinkClass::NVLink);
  EXPECT_EQ(machine.link(40, 40), LinkClass::Self);
}

TEST(KVTransfer, Errors) {
  std::vector<KVBlock> blocks;
  std::string error;
  KVTransferInput in = seedModel(10);
  EXPECT_FALSE(
      planKVTransfer(seed(), fromFlags(1, 1, 1, 3), in, blocks, &error));
  EXPECT_EQ(error, "kv transfer: the decode mesh: plan rule 'pp-layers': PP=3 "
                   "must divide the 8 layers");
  EXPECT_FALSE(
      planKVTransfer(fromFlags(3, 1, 1, 1), seed(), in, blocks, &error));
  EXPECT_EQ(error, "kv transfer: the prefill mesh: plan rule 'gqa': TP=3 must "
                   "divide n_kv=4, or be a multiple of it (KV-head "
                   "replication)");
  in.decodeReplica = 4;
  EXPECT_FALSE(planKVTransfer(seed(), seed(), in, blocks, &error));
  EXPECT_EQ(error, "kv transfer: replica 0 -> 4 is out of range (the meshes "
                   "have 4 and 4 DP replicas)");
  in = seedModel(0);
  EXPECT_FALSE(planKVTransfer(seed(), seed(), in, blocks, &error));
  EXPECT_EQ(error, "kv transfer: the layers, KV heads, head size and prompt "
                   "length must be at least 1");
}

} // namespace
