//===- RingAttention.cpp - ring attention over the CP group ---------------===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#define DEBUG_TYPE "mf-ring-attention"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFRINGATTENTIONPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
struct MFRingAttentionPass
    : public mf::impl::MFRingAttentionPassBase<MFRingAttentionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<MeshLayout> layout = requireLayout(module, "mf-ring-attention");
    if (failed(layout))
      return signalPassFailure();
    int64_t cp = layout->axisSize("cp");
    if (cp == 1)
      return;
    // A decode step's attention (over the rank's K/V history) moves its
    // queries instead: mf-pass-q-attention.
    for (moe::AttentionOp att : attentionsOf(module, /*overHistory=*/false)) {
      OpBuilder b(att);
      Location loc = att.getLoc();
      auto lseType = RankedTensorType::get(
          {att.getType().getDimSize(0), att.getType().getDimSize(1)},
          att.getType().getElementType());
      Value q = att.getQuery(), qp = att.getQPositions();
      Value k = att.getKey(), v = att.getValue(), kp = att.getKvPositions();
      auto partial = [&](Value key, Value value, Value keyPos) {
        return moe::AttentionPartialOp::create(
            b, loc, att.getType(), lseType, q, key, value, qp, keyPos,
            /*key_tiles=*/Value(), att.getScaleAttr());
      };
      auto first = partial(k, v, kp);
      Value out = first.getResult(), lse = first.getLse();
      ArrayAttr cpAxes = b.getStrArrayAttr({"cp"});
      // One tensor as both key and value (MLA's latent) travels once.
      const bool shared = k == v;
      // CP - 1 steps: each passes the block held to the next CP rank and
      // attends to the one received. K, V and positions are separate here;
      // mf-fuse-collectives makes them one message.
      for (int64_t step = 1; step < cp; ++step) {
        k = RingStepOp::create(b, loc, {k.getType()}, {k}, "attention", cpAxes)
                .getResult(0);
        v = shared ? k
                   : RingStepOp::create(b, loc, {v.getType()}, {v}, "attention",
                                        cpAxes)
                         .getResult(0);
        kp = RingStepOp::create(b, loc, {kp.getType()}, {kp}, "attention",
                                cpAxes)
                 .getResult(0);
        auto next = partial(k, v, kp);
        auto merged = moe::AttentionMergeOp::create(
            b, loc, out.getType(), lse.getType(), out, lse, next.getResult(),
            next.getLse());
        out = merged.getResult();
        lse = merged.getLse();
      }
      att.replaceAllUsesWith(out);
      att.erase();
    }
  }
};
} // namespace
