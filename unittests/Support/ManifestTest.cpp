//===- ManifestTest.cpp - Tests for the compiled model's manifest ---------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Support/Manifest.h"

#include "gtest/gtest.h"

using namespace meshfold;

namespace {

const char *kHeader = "meshfold-manifest 1\nentry prefill\nhidden 8\n";

TEST(ManifestTest, WeightStorageDTypes) {
  std::string text = std::string(kHeader) +
                     "param 0 model.norm.weight f32 1 8\n"
                     "param 1 lm_head.weight bf16 2 16 8 shard 0 attention "
                     "tp 2\n"
                     "end\n";
  Manifest m;
  std::string error;
  ASSERT_TRUE(parseManifest(text.c_str(), m, error)) << error;
  ASSERT_EQ(m.params.size(), 2u);
  EXPECT_FALSE(m.params[0].bf16);
  EXPECT_TRUE(m.params[1].bf16);
  EXPECT_EQ(m.params[1].shape, (std::vector<int64_t>{16, 8}));
  ASSERT_EQ(m.params[1].shards.size(), 1u);
  EXPECT_EQ(m.params[1].shards[0].dim, 0);
  EXPECT_EQ(m.params[1].shards[0].parts, 2);
}

TEST(ManifestTest, TwoSplits) {
  std::string text = std::string(kHeader) +
                     "param 0 model.layers.0.block_sparse_moe.experts.{e}.w2."
                     "weight f32 3 1 8 32 shard 0 experts ep 8 shard 2 "
                     "experts etp 2\nend\n";
  Manifest m;
  std::string error;
  ASSERT_TRUE(parseManifest(text.c_str(), m, error)) << error;
  ASSERT_EQ(m.params[0].shards.size(), 2u);
  EXPECT_EQ(m.params[0].shards[1].dim, 2);
  EXPECT_EQ(m.params[0].shards[1].axis, "etp");
  EXPECT_EQ(m.params[0].globalShape(), (std::vector<int64_t>{8, 8, 64}));
  Manifest again;
  ASSERT_TRUE(parseManifest(formatManifest(m).c_str(), again, error)) << error;
  EXPECT_EQ(formatManifest(again), formatManifest(m));

  std::string twice = std::string(kHeader) +
                      "param 0 w f32 2 4 4 shard 1 attention tp 2 shard 1 "
                      "attention cp 2\nend\n";
  EXPECT_FALSE(parseManifest(twice.c_str(), m, error));
  EXPECT_EQ(error, "manifest line 4: param 'w' is split twice along dim 1");
}

TEST(ManifestTest, UnknownStorageDTypeIsAnError) {
  std::string text =
      std::string(kHeader) + "param 0 model.norm.weight f16 1 8\nend\n";
  Manifest m;
  std::string error;
  EXPECT_FALSE(parseManifest(text.c_str(), m, error));
  EXPECT_EQ(error, "manifest line 4: param 'model.norm.weight' has storage "
                   "dtype 'f16', expected f32 or bf16");
}

// A corrupt rank is an error, not an allocation of that many dims (fuzzing
// found `param 1e f32 335477580` aborting with std::length_error).
TEST(ManifestTest, HugeRankIsAnError) {
  for (const char *entry : {"param 0 w f32 335477580\n",
                            "param 0 w f32 9223372036854775807 1 2\n"}) {
    std::string text = std::string(kHeader) + entry + "end\n";
    Manifest m;
    std::string error;
    EXPECT_FALSE(parseManifest(text.c_str(), m, error));
    EXPECT_NE(error.find("param 'w' has rank"), std::string::npos) << error;
  }
  std::string text = std::string(kHeader) + "param 0 w f32 2 3\nend\n";
  Manifest m;
  std::string error;
  EXPECT_FALSE(parseManifest(text.c_str(), m, error));
  EXPECT_EQ(error, "manifest line 4: malformed shape of param 'w'");
}

TEST(ManifestTest, MaxPositionsRoundTripsAndIsOptional) {
  Manifest m;
  m.entry = "prefill";
  m.maxPositions = 4096;
  std::string text = formatManifest(m);
  EXPECT_NE(text.find("\nmax_positions 4096\n"), std::string::npos);
  Manifest back;
  std::string error;
  ASSERT_TRUE(parseManifest(text.c_str(), back, error)) << error;
  EXPECT_EQ(back.maxPositions, 4096);

  // A manifest without the field (no limit in the config, or an older
  // compiler's): 0, no limit; and none is written for it.
  Manifest old;
  ASSERT_TRUE(
      parseManifest((std::string(kHeader) + "end\n").c_str(), old, error))
      << error;
  EXPECT_EQ(old.maxPositions, 0);
  EXPECT_EQ(formatManifest(old).find("max_positions"), std::string::npos);
}

// A cache whose key is its value (MLA's latent): kept once, and the field
// is written only when set.
TEST(ManifestTest, KVSharedRoundTripsAndIsOptional) {
  Manifest m;
  m.entry = "prefill";
  m.kvShared = true;
  std::string text = formatManifest(m);
  EXPECT_NE(text.find("\nkv_shared 1\n"), std::string::npos);
  Manifest back;
  std::string error;
  ASSERT_TRUE(parseManifest(text.c_str(), back, error)) << error;
  EXPECT_TRUE(back.kvShared);
  EXPECT_EQ(back.kvCopies(), 1);
  Manifest plain;
  plain.entry = "prefill";
  EXPECT_EQ(formatManifest(plain).find("kv_shared"), std::string::npos);
  EXPECT_EQ(plain.kvCopies(), 2);
}

// A program that records every prompt position's logits says so; others
// write nothing.
TEST(ManifestTest, PromptLogitsRoundTripsAndIsOptional) {
  Manifest m;
  m.entry = "prefill";
  m.promptLogits = true;
  std::string text = formatManifest(m);
  EXPECT_NE(text.find("\nprompt_logits 1\n"), std::string::npos);
  Manifest back;
  std::string error;
  ASSERT_TRUE(parseManifest(text.c_str(), back, error)) << error;
  EXPECT_TRUE(back.promptLogits);
  Manifest plain;
  plain.entry = "prefill";
  EXPECT_EQ(formatManifest(plain).find("prompt_logits"), std::string::npos);
}

// A batch-invariant program's history tile round-trips; a packed history
// (1) writes nothing.
TEST(ManifestTest, HistoryTileRoundTripsAndIsOptional) {
  Manifest m;
  m.entry = "prefill";
  m.historyTile = 64;
  std::string text = formatManifest(m);
  EXPECT_NE(text.find("\nhistory_tile 64\n"), std::string::npos);
  Manifest back;
  std::string error;
  ASSERT_TRUE(parseManifest(text.c_str(), back, error)) << error;
  EXPECT_EQ(back.historyTile, 64);
  Manifest plain;
  plain.entry = "prefill";
  EXPECT_EQ(formatManifest(plain).find("history_tile"), std::string::npos);
  Manifest packed;
  ASSERT_TRUE(parseManifest(formatManifest(plain).c_str(), packed, error));
  EXPECT_EQ(packed.historyTile, 1);
}

TEST(ManifestTest, DecodeAndEosRoundTripAndAreOptional) {
  Manifest m;
  m.entry = "prefill";
  m.decode = "decode";
  m.eosTokens = {2, 7};
  std::string text = formatManifest(m);
  EXPECT_NE(text.find("\ndecode decode\n"), std::string::npos);
  EXPECT_NE(text.find("\neos 2 7\n"), std::string::npos);
  Manifest back;
  std::string error;
  ASSERT_TRUE(parseManifest(text.c_str(), back, error)) << error;
  EXPECT_EQ(back.decode, "decode");
  EXPECT_EQ(back.eosTokens, (std::vector<int64_t>{2, 7}));

  Manifest none;
  ASSERT_TRUE(
      parseManifest((std::string(kHeader) + "end\n").c_str(), none, error))
      << error;
  EXPECT_TRUE(none.decode.empty());
  EXPECT_TRUE(none.eosTokens.empty());
  EXPECT_EQ(formatManifest(none).find("\neos"), std::string::npos);

  Manifest bad;
  EXPECT_FALSE(parseManifest((std::string(kHeader) + "eos 3 -1\nend\n").c_str(),
                             bad, error));
  EXPECT_NE(error.find("negative eos token id"), std::string::npos) << error;
}

TEST(ManifestTest, GlobalShapeAndExpertNames) {
  ManifestParam p;
  p.name = "model.layers.0.block_sparse_moe.experts.{e}.w1.weight";
  p.shape = {2, 128, 64};
  EXPECT_EQ(p.globalShape(), p.shape);
  p.shards = {{0, 16, "experts", "ep"}};
  EXPECT_EQ(p.globalShape(), (std::vector<int64_t>{32, 128, 64}));
  EXPECT_EQ(p.shape, (std::vector<int64_t>{2, 128, 64}));
  // Each expert split over etp too.
  p.shards.push_back({1, 2, "experts", "etp"});
  EXPECT_EQ(p.globalShape(), (std::vector<int64_t>{32, 256, 64}));
  EXPECT_EQ(p.expertName(17),
            "model.layers.0.block_sparse_moe.experts.17.w1.weight");
  ManifestParam q;
  q.name = "model.norm.weight";
  EXPECT_EQ(q.expertName(3), "model.norm.weight");
}

TEST(ManifestTest, PlacementsRoundTrip) {
  Manifest m;
  m.entry = "prefill";
  m.experts = 4;
  ManifestParam p;
  p.name = "experts.{e}.w1.weight";
  p.shape = {3, 16, 8};
  p.placedLayer = 1;
  p.placedExperts = 4;
  m.params.push_back(p);
  ExpertPlacement placement;
  placement.ep = 2;
  placement.numExperts = 4;
  placement.slots = 3;
  placement.experts = {0, 1, 2, 0, 2, 3};
  m.placements[1] = placement;
  Manifest back;
  std::string error;
  ASSERT_TRUE(parseManifest(formatManifest(m).c_str(), back, error)) << error;
  ASSERT_EQ(back.params.size(), 1u);
  EXPECT_EQ(back.params[0].placedLayer, 1);
  EXPECT_EQ(back.params[0].globalShape(), (std::vector<int64_t>{4, 16, 8}));
  ASSERT_EQ(back.placements.count(1), 1u);
  EXPECT_EQ(back.placements[1].experts, placement.experts);
  EXPECT_EQ(back.placements[1].slots, 3);
  EXPECT_EQ(back.placements[1].ep, 2);
}

TEST(ManifestTest, MalformedPlacementsAreErrors) {
  for (const char *line :
       {"placement 0 2 2 4 0 1 2 9\n", // expert 9 of 4
        "placement 0 2 2 4 0 0 1 2\n", // expert 0 twice on a rank, 3 unplaced
        "placement 0 2 2 4 0 1 2\n",   // a slot short
        "placement 0 0 2 4\n"}) {
    std::string text = std::string(kHeader) + line + "end\n";
    Manifest m;
    std::string error;
    EXPECT_FALSE(parseManifest(text.c_str(), m, error)) << line;
    EXPECT_NE(error.find("placement"), std::string::npos) << error;
  }
}

} // namespace

// Norms over the whole query and key projections (OLMoE): the traffic
// report's all-reduce of their sums; written only when set.
TEST(ManifestTest, ProjNormsRoundTripsAndIsOptional) {
  Manifest m;
  m.entry = "prefill";
  m.projNorms = true;
  std::string text = formatManifest(m);
  EXPECT_NE(text.find("\nproj_norms 1\n"), std::string::npos);
  Manifest back;
  std::string error;
  ASSERT_TRUE(parseManifest(text.c_str(), back, error)) << error;
  EXPECT_TRUE(back.projNorms);
  Manifest plain;
  plain.entry = "prefill";
  EXPECT_EQ(formatManifest(plain).find("proj_norms"), std::string::npos);
}
