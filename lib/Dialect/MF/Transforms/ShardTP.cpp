//===- ShardTP.cpp - tensor parallelism over attention heads --------------===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#define DEBUG_TYPE "mf-shard-tp"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFSHARDTPPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
RankedTensorType withDim(Type t, int64_t dim, int64_t size) {
  auto rt = cast<RankedTensorType>(t);
  SmallVector<int64_t> shape(rt.getShape());
  shape[dim] = size;
  return RankedTensorType::get(shape, rt.getElementType());
}

/// Rebuilds one projection with `heads` local heads: the weight (and bias)
/// slice, the linear, the norm over the whole projection if it has one, the
/// clip if it has one, and the head split. `parts` ranks hold distinct heads,
/// each `tp / parts` times.
///
/// The norm (OLMoE's q_norm / k_norm, an `moe.rms_norm` over all heads)
/// needs the whole row's sum of squares: each rank sums its columns'
/// (moe.sum_squares), the TP group all-reduces the sums, and moe.rms_scale
/// normalises the rank's columns with them and its slice of the weight. A
/// head held by several ranks is summed once per holder: the count of
/// squares is the projection's width times that.
Value localHeads(OpBuilder &b, moe::LinearOp lin, Operation *norm,
                 moe::ClipOp clip, tensor::ExpandShapeOp exp, int64_t heads,
                 int64_t headDim, int64_t parts, int64_t tp) {
  moe::ParamOp w = paramOf(lin.getWeight());
  RankedTensorType wType = w.getType();
  auto local = shardParam(b, w, withDim(wType, 0, heads * headDim), 0,
                          "attention", "tp", parts);
  // A bias (Qwen2-MoE) is split like the weight's rows.
  Value localBias;
  if (moe::ParamOp bias = paramOf(lin.getBias()))
    localBias = shardParam(b, bias, withDim(bias.getType(), 0, heads * headDim),
                           0, "attention", "tp", parts);
  Value y = moe::LinearOp::create(b, lin.getLoc(),
                                  withDim(lin.getType(), 1, heads * headDim),
                                  lin.getInput(), local, localBias);
  if (auto whole = dyn_cast_or_null<moe::RMSNormOp>(norm)) {
    Location loc = whole.getLoc();
    moe::ParamOp nw = paramOf(whole.getWeight());
    auto localW = shardParam(b, nw, withDim(nw.getType(), 0, heads * headDim),
                             0, "attention", "tp", parts);
    auto yType = cast<RankedTensorType>(y.getType());
    auto sumsType =
        RankedTensorType::get({yType.getDimSize(0)}, yType.getElementType());
    Value sums = moe::SumSquaresOp::create(b, loc, sumsType, y);
    sums = AllReduceOp::create(b, loc, ValueRange{sums}, "attention", {"tp"})
               .getResult(0);
    int64_t width = whole.getType().getDimSize(1);
    y = moe::RMSScaleOp::create(b, loc, yType, y, sums, localW,
                                whole.getEpsilonAttr(),
                                b.getI64IntegerAttr(width * (tp / parts)));
  }
  // A clip (clip_qkv) acts on each element: the same on the rank's columns.
  if (clip)
    y = moe::ClipOp::create(b, clip.getLoc(), y, clip.getLimitAttr());
  SmallVector<OpFoldResult> shape = exp.getMixedOutputShape();
  shape[1] = b.getIndexAttr(heads);
  return tensor::ExpandShapeOp::create(b, exp.getLoc(),
                                       withDim(exp.getType(), 1, heads), y,
                                       exp.getReassociationIndices(), shape);
}

/// `rope`'s rotation (its attributes kept) on `x`, the rank's heads.
Value reapply(OpBuilder &b, moe::RoPEOp rope, Value x) {
  Operation *op = b.clone(*rope);
  op->setOperand(0, x);
  op->getResult(0).setType(x.getType());
  return op->getResult(0);
}

struct MFShardTPPass : public mf::impl::MFShardTPPassBase<MFShardTPPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<MeshLayout> layout = requireLayout(module, "mf-shard-tp");
    if (failed(layout))
      return signalPassFailure();
    int64_t tp = layout->axisSize("tp");
    if (tp == 1)
      return;
    SmallVector<moe::AttentionOp> attentions;
    module.walk([&](moe::AttentionOp op) { attentions.push_back(op); });
    for (moe::AttentionOp att : attentions)
      if (failed(shard(att, tp)))
        return signalPassFailure();
  }

  /// MLA: each rank holds nh / TP heads: their rows of Wq and kv_b_proj
  /// and their columns of Wo. The latent (kv_a_proj_with_mqa, its norm, the
  /// RoPE key) and the query LoRA (q_a_proj) are shared by every head: each
  /// rank computes them whole, and caches the whole latent. Splitting them
  /// would save little (kv_lora_rank + qk_rope_head_dim and q_lora_rank
  /// columns against the heads' nh x (nope + rope + v)) and cost an
  /// all-gather of the latent before every attention.
  LogicalResult shardLatent(moe::AttentionOp att, int64_t tp) {
    FailureOr<LatentAttentionChain> chain = matchLatentAttention(att);
    if (failed(chain))
      return failure();
    LatentAttentionChain &c = *chain;
    if (paramOf(c.qLin.getWeight())->hasAttr(MFDialect::getShardAttrName()))
      return success();
    int64_t nh = att.getQuery().getType().getDimSize(1);
    if (nh % tp != 0)
      return att.emitError() << "plan rule 'tp-heads': TP=" << tp
                             << " must divide n_heads=" << nh;
    int64_t nhLocal = nh / tp;
    OpBuilder b(att);
    Location loc = att.getLoc();
    // A slice of the rank's heads (dim `dim`), offsets as before; a dynamic
    // token count read from the new source.
    auto reslice = [&](tensor::ExtractSliceOp s, Value src,
                       int64_t dim) -> Value {
      SmallVector<OpFoldResult> sizes = s.getMixedSizes();
      sizes[dim] = b.getIndexAttr(nhLocal);
      if (isa<Value>(sizes[0]))
        sizes[0] = tensor::DimOp::create(b, s.getLoc(), src, 0).getResult();
      return tensor::ExtractSliceOp::create(
          b, s.getLoc(), withDim(s.getType(), dim, nhLocal), src,
          s.getMixedOffsets(), sizes, s.getMixedStrides());
    };
    // The query's rows of the rank's heads.
    moe::ParamOp wq = paramOf(c.qLin.getWeight());
    int64_t qk = c.qExp.getType().getDimSize(2);
    Value q = moe::LinearOp::create(
        b, c.qLin.getLoc(), withDim(c.qLin.getType(), 1, nhLocal * qk),
        c.qLin.getInput(),
        shardParam(b, wq, withDim(wq.getType(), 0, nhLocal * qk), 0,
                   "attention", "tp", tp));
    SmallVector<OpFoldResult> shape = c.qExp.getMixedOutputShape();
    shape[1] = b.getIndexAttr(nhLocal);
    q = tensor::ExpandShapeOp::create(b, c.qExp.getLoc(),
                                      withDim(c.qExp.getType(), 1, nhLocal), q,
                                      c.qExp.getReassociationIndices(), shape);
    // kv_b_proj's rows of the rank's heads: its W_UK and W_UV.
    moe::ParamOp wkv = paramOf(c.wkvExp.getSrc());
    int64_t perHead = c.wkvExp.getType().getDimSize(1);
    Value wkvLocal = tensor::ExpandShapeOp::create(
        b, c.wkvExp.getLoc(), withDim(c.wkvExp.getType(), 0, nhLocal),
        shardParam(b, wkv, withDim(wkv.getType(), 0, nhLocal * perHead), 0,
                   "attention", "tp", tp),
        c.wkvExp.getReassociationIndices());
    Value wUK = reslice(c.wUK, wkvLocal, 0), wUV = reslice(c.wUV, wkvLocal, 0);
    Value absorbed = moe::HeadLinearOp::create(
        b, c.absorb.getLoc(), withDim(c.absorb.getType(), 1, nhLocal),
        reslice(c.qNope, q, 1), wUK, c.absorb.getTransposeWeightAttr());
    Value qRopeIn = reslice(c.qRopeIn, q, 1);
    Value qRope = reapply(b, c.qRope, qRopeIn);
    Value query = tensor::ConcatOp::create(b, c.qCat.getLoc(), 2,
                                           ValueRange{absorbed, qRope});
    Value out = moe::AttentionOp::create(
        b, loc, query.getType(), query, att.getKey(), att.getValue(),
        att.getQPositions(), att.getKvPositions(), /*key_tiles=*/Value(),
        att.getScaleAttr());
    Value values = moe::HeadLinearOp::create(
        b, c.up.getLoc(), withDim(c.up.getType(), 1, nhLocal),
        reslice(c.outSlice, out, 1), wUV, c.up.getTransposeWeightAttr());
    int64_t v = c.up.getType().getDimSize(2);
    Value flat = tensor::CollapseShapeOp::create(
        b, c.collapse.getLoc(), withDim(c.collapse.getType(), 1, nhLocal * v),
        values, c.collapse.getReassociationIndices());
    b.setInsertionPoint(c.oLin);
    moe::ParamOp wo = paramOf(c.oLin.getWeight());
    Value partial = moe::LinearOp::create(
        b, c.oLin.getLoc(), c.oLin.getType(), flat,
        shardParam(b, wo, withDim(wo.getType(), 1, nhLocal * v), 1, "attention",
                   "tp", tp));
    Value sum = AllReduceOp::create(b, c.oLin.getLoc(), ValueRange{partial},
                                    "attention", {"tp"})
                    .getResult(0);
    c.oLin.getResult().replaceAllUsesWith(sum);
    eraseAndClean({c.oLin, c.collapse, c.up, c.outSlice, att, c.qCat, c.qRope,
                   c.absorb, c.wUK, c.wUV, c.wkvExp, c.qNope, c.qRopeIn, c.qExp,
                   c.qLin});
    return success();
  }

  LogicalResult shard(moe::AttentionOp att, int64_t tp) {
    if (isLatentAttention(att))
      return shardLatent(att, tp);
    FailureOr<AttentionChain> chain = matchAttentionChain(att);
    if (failed(chain))
      return failure();
    AttentionChain &c = *chain;
    // Already sharded (the pass ran before): leave it.
    if (paramOf(c.qLin.getWeight())->hasAttr(MFDialect::getShardAttrName()))
      return success();
    auto qType = att.getQuery().getType();
    int64_t nh = qType.getDimSize(1), dh = qType.getDimSize(2);
    int64_t nkv = att.getKey().getType().getDimSize(1);
    // The rules mf-verify-plan checks, again here so that the pass alone
    // never builds wrong IR.
    if (nh % tp != 0)
      return att.emitError() << "plan rule 'tp-heads': TP=" << tp
                             << " must divide n_heads=" << nh;
    if (nkv % tp != 0 && !(nkv < tp && tp % nkv == 0))
      return att.emitError()
             << "plan rule 'gqa': TP=" << tp << " must divide n_kv=" << nkv
             << ", or be a multiple of it (KV-head replication)";
    int64_t nhLocal = nh / tp;
    // With n_kv < TP each rank holds one KV head, shared by TP/n_kv ranks.
    int64_t kvParts = std::min(nkv, tp), nkvLocal = kvHeadsPerRank(nkv, tp);

    OpBuilder b(att);
    Location loc = att.getLoc();
    b.setInsertionPoint(c.qLin);
    Value q = localHeads(b, c.qLin, c.qProjNorm, c.qClip, c.qExp, nhLocal, dh,
                         tp, tp);
    Value k = localHeads(b, c.kLin, c.kProjNorm, c.kClip, c.kExp, nkvLocal, dh,
                         kvParts, tp);
    Value v = localHeads(b, c.vLin, nullptr, c.vClip, c.vExp, nkvLocal, dh,
                         kvParts, tp);
    b.setInsertionPoint(att);
    // Per-head norms act on each head alone: the same [d_h] weight on the
    // rank's heads.
    if (c.qNorm) {
      q = moe::RMSNormOp::create(b, c.qNorm.getLoc(), q.getType(), q,
                                 c.qNorm.getWeight(), c.qNorm.getEpsilonAttr());
      k = moe::RMSNormOp::create(b, c.kNorm.getLoc(), k.getType(), k,
                                 c.kNorm.getWeight(), c.kNorm.getEpsilonAttr());
    }
    q = reapply(b, c.qRope, q);
    k = reapply(b, c.kRope, k);
    // This rank's KV heads start at (tp * kvParts / TP) * nkvLocal.
    Value first = scaledCoord(b, loc, "attention", "tp", kvParts, tp);
    Value offset = arith::MulIOp::create(
        b, loc, first, arith::ConstantIndexOp::create(b, loc, nkvLocal));
    Value stepV = c.history ? c.history.getStepValue() : att.getValue();
    for (moe::KVCacheOp cache : c.caches) {
      Value cacheV = cache.getValue() == stepV ? v : Value();
      if (!cacheV)
        return cache.emitError("partitioning: the KV cache must record the "
                               "attention's value");
      moe::KVCacheOp::create(b, cache.getLoc(), k, cacheV, cache.getPositions(),
                             offset, cache.getLayerAttr());
    }
    Value kvPositions = att.getKvPositions();
    if (c.history) {
      // The rank's own cache: its KV heads.
      auto local = cast<RankedTensorType>(k.getType());
      auto histType =
          withDim(c.history.getKey().getType(), 1, local.getDimSize(1));
      auto history = moe::KVHistoryOp::create(
          b, c.history.getLoc(), histType, histType,
          c.history.getPositions().getType(), k, v,
          c.history.getStepPositions(), offset, c.history.getLayerAttr());
      k = history.getKey();
      v = history.getValue();
      kvPositions = history.getPositions();
    }
    Value out = moe::AttentionOp::create(
        b, loc, q.getType(), q, k, v, att.getQPositions(), kvPositions,
        /*key_tiles=*/Value(), att.getScaleAttr());
    auto flatType = withDim(c.collapse.getType(), 1, nhLocal * dh);
    Value flat =
        tensor::CollapseShapeOp::create(b, c.collapse.getLoc(), flatType, out,
                                        c.collapse.getReassociationIndices());
    b.setInsertionPoint(c.oLin);
    moe::ParamOp wo = paramOf(c.oLin.getWeight());
    auto woLocal = shardParam(b, wo, withDim(wo.getType(), 1, nhLocal * dh), 1,
                              "attention", "tp", tp);
    Value partial = moe::LinearOp::create(b, c.oLin.getLoc(), c.oLin.getType(),
                                          flat, woLocal);
    Value sum = AllReduceOp::create(b, c.oLin.getLoc(), ValueRange{partial},
                                    "attention", {"tp"})
                    .getResult(0);
    c.oLin.getResult().replaceAllUsesWith(sum);
    SmallVector<Operation *> old = {c.oLin, c.collapse, att};
    for (moe::KVCacheOp cache : c.caches)
      old.push_back(cache);
    if (c.history)
      old.push_back(c.history);
    old.append({c.qRope, c.kRope});
    if (c.qNorm)
      old.append({c.qNorm, c.kNorm});
    old.append({c.qExp, c.kExp, c.vExp});
    if (c.qClip)
      old.append({c.qClip, c.kClip, c.vClip});
    if (c.qProjNorm)
      old.append({c.qProjNorm, c.kProjNorm});
    old.append({c.qLin, c.kLin, c.vLin});
    eraseAndClean(old);
    return success();
  }
};
} // namespace
