//===- InsertSP.cpp - sequence parallelism inside the TP group ------------===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#define DEBUG_TYPE "mf-insert-sp"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFINSERTSPPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
/// This rank's 1/TP of `v`'s rows (token dims are dynamic, see below).
Value sliceTP(OpBuilder &b, Location loc, Value v) {
  return SliceOp::create(b, loc, v.getType(), v, b.getStringAttr("attention"),
                         b.getStrArrayAttr({"tp"}), b.getI64IntegerAttr(0));
}

struct MFInsertSPPass : public mf::impl::MFInsertSPPassBase<MFInsertSPPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<MeshLayout> layout = requireLayout(module, "mf-insert-sp");
    if (failed(layout))
      return signalPassFailure();
    if (layout->axisSize("tp") == 1)
      return;
    for (func::FuncOp fn : module.getOps<func::FuncOp>())
      if (failed(runOnFunction(fn)))
        return signalPassFailure();
  }

  LogicalResult runOnFunction(func::FuncOp fn) {
    SmallVector<moe::LayerOp> layers;
    for (Operation &op : fn.getBody().getOps())
      if (auto layer = dyn_cast<moe::LayerOp>(op))
        layers.push_back(layer);
    if (layers.empty())
      return success();
    Value pos = layers.front().getInputs()[1];
    // Token counts change per rank: the model's token dims must be dynamic
    // (as meshfold-import-hf makes them).
    if (!cast<RankedTensorType>(pos.getType()).isDynamicDim(0))
      return fn.emitError("mf-insert-sp: the token dimension must be dynamic");
    for (moe::LayerOp layer : layers)
      if (layer.getInputs().size() != 2 || layer.getInputs()[1] != pos)
        return layer.emitError("mf-insert-sp: every layer must take (residual, "
                               "positions) with one positions value");

    // This rank's tokens: its 1/TP of the CP rank's tokens.
    OpBuilder b(fn.getContext());
    b.setInsertionPointAfterValue(pos);
    Value posSP = sliceTP(b, pos.getLoc(), pos);
    for (OpOperand &use : llvm::make_early_inc_range(pos.getUses()))
      if (!isa<SliceOp>(use.getOwner()))
        use.set(posSP);
    SmallVector<moe::EmbedOp> embeds;
    fn.walk([&](moe::EmbedOp op) { embeds.push_back(op); });
    for (moe::EmbedOp embed : embeds) {
      // Tokens taken by position now follow the sliced positions.
      if (auto take = embed.getTokens().getDefiningOp<TakeOp>();
          take && take.getIndices() == posSP)
        continue;
      b.setInsertionPoint(embed);
      embed.getTokensMutable().assign(
          sliceTP(b, embed.getLoc(), embed.getTokens()));
    }

    for (moe::LayerOp layer : layers) {
      // Attention sees the CP rank's tokens: pass their positions too.
      layer->insertOperands(2, pos);
      Block &body = layer.getBody().front();
      BlockArgument spPos = body.getArgument(1);
      BlockArgument cpPos = body.addArgument(pos.getType(), pos.getLoc());
      spPos.replaceAllUsesWith(cpPos);
      SmallVector<moe::AttentionOp> attentions;
      layer.walk([&](moe::AttentionOp op) { attentions.push_back(op); });
      for (moe::AttentionOp att : attentions)
        if (failed(rewriteAttention(att)))
          return failure();
    }
    return success();
  }

  LogicalResult rewriteAttention(moe::AttentionOp att) {
    // The linears that read the layer's normalised input, the splits into
    // heads (their token dim), and the output projection.
    SmallVector<moe::LinearOp> inputs;
    SmallVector<tensor::ExpandShapeOp> splits;
    moe::LinearOp oLin;
    if (isLatentAttention(att)) {
      FailureOr<LatentAttentionChain> chain = matchLatentAttention(att);
      if (failed(chain))
        return failure();
      LatentAttentionChain &c = *chain;
      inputs = {c.qInLin ? c.qInLin : c.qLin, c.kvLin};
      splits = {c.qExp};
      llvm::append_range(splits, c.kvExps);
      oLin = c.oLin;
    } else {
      FailureOr<AttentionChain> chain = matchAttentionChain(att);
      if (failed(chain))
        return failure();
      AttentionChain &c = *chain;
      inputs = {c.qLin, c.kLin, c.vLin};
      splits = {c.qExp, c.kExp, c.vExp};
      oLin = c.oLin;
    }
    Value x = inputs.front().getInput();
    for (moe::LinearOp lin : inputs)
      if (lin.getInput() != x)
        return att.emitError("mf-insert-sp: the attention's projections must "
                             "read one input");
    // All-gather the TP group's tokens before the projections.
    OpBuilder b(inputs.front());
    b.setInsertionPointAfterValue(x);
    Location loc = inputs.front().getLoc();
    Value gathered = AllGatherOp::create(
        b, loc, x.getType(), x, b.getStringAttr("attention"),
        b.getStrArrayAttr({"tp"}), b.getI64IntegerAttr(0));
    Value rows = tensor::DimOp::create(b, loc, gathered, 0);
    for (moe::LinearOp lin : inputs)
      lin.getInputMutable().assign(gathered);
    for (tensor::ExpandShapeOp exp : splits) {
      if (exp.getOutputShape().size() != 1)
        return exp.emitError("mf-insert-sp: expected one dynamic token dim");
      exp.getOutputShapeMutable().assign(rows);
    }
    // The partial sums come back reduce-scattered: each rank gets its
    // tokens whole. Without TP sharding they are whole already: slice.
    Value out = oLin.getResult();
    Operation *user = out.hasOneUse() ? *out.user_begin() : nullptr;
    b.setInsertionPointAfter(user ? user : oLin.getOperation());
    auto ar = dyn_cast_or_null<AllReduceOp>(user);
    if (ar && ar.getInputs().size() == 1) {
      Value rs = ReduceScatterOp::create(b, ar.getLoc(), out.getType(), out,
                                         ar.getMeshAttr(), ar.getAxesAttr(),
                                         b.getI64IntegerAttr(0));
      ar.getResult(0).replaceAllUsesWith(rs);
      ar.erase();
    } else {
      b.setInsertionPointAfter(oLin);
      Value s = sliceTP(b, oLin.getLoc(), out);
      out.replaceAllUsesExcept(s, s.getDefiningOp());
    }
    return success();
  }
};
} // namespace
