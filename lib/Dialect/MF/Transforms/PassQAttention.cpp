//===- PassQAttention.cpp - decode attention that moves the queries -------===//
//
// Prefill's ring attention moves K/V blocks to the queries. In a decode step
// each CP rank holds its share of a cache that grows with every token, and
// the step has a few query rows: the queries travel instead, with the
// running partial output, and the merged output comes back to its rank.
//
//===----------------------------------------------------------------------===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#define DEBUG_TYPE "mf-pass-q-attention"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFPASSQATTENTIONPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
struct MFPassQAttentionPass
    : public mf::impl::MFPassQAttentionPassBase<MFPassQAttentionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<MeshLayout> layout = requireLayout(module, "mf-pass-q-attention");
    if (failed(layout))
      return signalPassFailure();
    int64_t cp = layout->axisSize("cp");
    if (cp == 1)
      return;
    for (moe::AttentionOp att : attentionsOf(module, /*overHistory=*/true))
      rewrite(att, cp);
  }

  void rewrite(moe::AttentionOp att, int64_t cp) {
    OpBuilder b(att);
    Location loc = att.getLoc();
    auto oType = att.getType();
    auto lseType = RankedTensorType::get(
        {oType.getDimSize(0), oType.getDimSize(1)}, oType.getElementType());
    Value k = att.getKey(), v = att.getValue(), kp = att.getKvPositions();
    auto partial = [&](Value query, Value queryPos) {
      return moe::AttentionPartialOp::create(
          b, loc, oType, lseType, query, k, v, queryPos, kp,
          /*key_tiles=*/Value(), att.getScaleAttr());
    };
    Value q = att.getQuery(), qp = att.getQPositions();
    auto first = partial(q, qp);
    Value out = first.getResult(), lse = first.getLse();
    ArrayAttr cpAxes = b.getStrArrayAttr({"cp"});
    auto step = [&](Value x) {
      return RingStepOp::create(b, loc, ValueRange{x}, "attention", {"cp"},
                                /*queries=*/true)
          .getResult(0);
    };
    // CP - 1 steps: the queries of CP rank r - s, with their partial over
    // ranks r - s .. r - 1, reach rank r, which adds its own. The queries,
    // the partial, its log-sum-exp and the positions are separate here;
    // mf-fuse-collectives makes them one message.
    for (int64_t s = 1; s < cp; ++s) {
      q = step(q);
      Value prevOut = step(out), prevLse = step(lse);
      qp = step(qp);
      auto next = partial(q, qp);
      auto merged = moe::AttentionMergeOp::create(
          b, loc, oType, lseType, prevOut, prevLse, next.getResult(),
          next.getLse());
      out = merged.getResult();
      lse = merged.getLse();
    }
    // Rank r now holds the merged output of rank r + 1's queries: one more
    // step hands it back, with the queries' positions (they say which
    // token's output the message carries).
    out = step(out);
    (void)step(qp);
    att.replaceAllUsesWith(out);
    att.erase();
  }
};
} // namespace
