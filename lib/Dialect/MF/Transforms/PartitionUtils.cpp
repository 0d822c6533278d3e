//===- PartitionUtils.cpp - shared helpers of the partitioning passes -----===//

#include "PartitionUtils.h"

#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

FailureOr<MeshLayout> mf::requireLayout(ModuleOp module, StringRef pass) {
  auto plan = module->getAttrOfType<PlanAttr>(MFDialect::getPlanAttrName());
  if (!plan)
    return module.emitError() << pass << ": the module has no plan (set "
                              << MFDialect::getPlanAttrName()
                              << " or use the mf-partition options)";
  std::string error;
  std::optional<MeshLayout> layout =
      MeshLayout::create(plan.toPlanSpec(), &error);
  if (!layout)
    return module.emitError() << error;
  // Partitioning makes the ops local: keep the global dimensions.
  if (!module->hasAttr(moe::getModelInfoAttrName())) {
    FailureOr<moe::ModelInfo> info = moe::getModelInfo(module);
    if (failed(info))
      return failure();
    if (info->numLayers > 0)
      moe::setModelInfoAttr(module, *info);
  }
  return *layout;
}

moe::ParamOp mf::shardParam(OpBuilder &b, moe::ParamOp param,
                            RankedTensorType type, int64_t dim, StringRef mesh,
                            StringRef axis, int64_t parts) {
  auto local = moe::ParamOp::create(b, param.getLoc(), type, param.getName());
  local->setAttr(MFDialect::getShardAttrName(),
                 ShardAttr::get(b.getContext(), dim, b.getStringAttr(mesh),
                                b.getStringAttr(axis), parts));
  return local;
}

moe::ParamOp mf::paramOf(Value v) { return v.getDefiningOp<moe::ParamOp>(); }

void mf::removeDeadOps(Region &region) {
  bool changed = true;
  while (changed) {
    changed = false;
    SmallVector<Operation *> dead;
    region.walk<WalkOrder::PostOrder>([&](Operation *op) {
      if (isOpTriviallyDead(op))
        dead.push_back(op);
    });
    for (Operation *op : llvm::reverse(dead)) {
      if (!op->use_empty())
        continue;
      op->erase();
      changed = true;
    }
  }
}

void mf::eraseAndClean(ArrayRef<Operation *> ops) {
  Region *region = nullptr;
  for (Operation *op : ops) {
    region = op->getParentRegion();
    op->dropAllUses();
  }
  for (Operation *op : ops)
    op->erase();
  if (region)
    removeDeadOps(*region);
}

Value mf::scaledCoord(OpBuilder &b, Location loc, StringRef mesh,
                      StringRef axis, int64_t num, int64_t den) {
  Value c = CoordOp::create(b, loc, b.getIndexType(), mesh, axis);
  if (num == den)
    return c;
  if (num != 1)
    c = arith::MulIOp::create(b, loc, c,
                              arith::ConstantIndexOp::create(b, loc, num));
  if (den != 1)
    c = arith::DivUIOp::create(b, loc, c,
                               arith::ConstantIndexOp::create(b, loc, den));
  return c;
}

FailureOr<AttentionChain> mf::matchAttentionChain(moe::AttentionOp att) {
  AttentionChain c;
  c.attention = att;
  auto fail = [&](StringRef what) -> FailureOr<AttentionChain> {
    return att.emitError() << "partitioning: unexpected structure around "
                              "attention: "
                           << what;
  };
  Value key = att.getKey(), value = att.getValue();
  if ((c.history = key.getDefiningOp<moe::KVHistoryOp>())) {
    if (value != c.history.getValue() ||
        att.getKvPositions() != c.history.getPositions())
      return fail("a K/V history must give the attention's key, value and "
                  "positions");
    key = c.history.getStepKey();
    value = c.history.getStepValue();
  }
  c.qRope = att.getQuery().getDefiningOp<moe::RoPEOp>();
  c.kRope = key.getDefiningOp<moe::RoPEOp>();
  if (!c.qRope || !c.kRope)
    return fail("query and key must come from moe.rope");
  Value qHeads = c.qRope.getInput(), kHeads = c.kRope.getInput();
  c.qNorm = qHeads.getDefiningOp<moe::RMSNormOp>();
  c.kNorm = kHeads.getDefiningOp<moe::RMSNormOp>();
  if (bool(c.qNorm) != bool(c.kNorm))
    return fail("per-head norms must be on both the query and the key");
  if (c.qNorm) {
    if (!paramOf(c.qNorm.getWeight()) || !paramOf(c.kNorm.getWeight()))
      return fail("per-head norms must scale by weights");
    qHeads = c.qNorm.getInput();
    kHeads = c.kNorm.getInput();
  }
  c.qExp = qHeads.getDefiningOp<tensor::ExpandShapeOp>();
  c.kExp = kHeads.getDefiningOp<tensor::ExpandShapeOp>();
  c.vExp = value.getDefiningOp<tensor::ExpandShapeOp>();
  if (!c.qExp || !c.kExp || !c.vExp)
    return fail("heads must be split by tensor.expand_shape");
  // A clip of the split's input (clip_qkv), then a norm over the whole
  // projection, whole or TP-split: its input.
  auto unclip = [](Value src, moe::ClipOp &clip) -> Value {
    if ((clip = src.getDefiningOp<moe::ClipOp>()))
      return clip.getInput();
    return src;
  };
  auto projection = [&](tensor::ExpandShapeOp exp, Operation *&norm,
                        moe::ClipOp &clip) -> Value {
    Value src = unclip(exp.getSrc(), clip);
    norm = src.getDefiningOp();
    if (auto n = dyn_cast_or_null<moe::RMSNormOp>(norm))
      return n.getInput();
    if (auto n = dyn_cast_or_null<moe::RMSScaleOp>(norm))
      return n.getInput();
    norm = nullptr;
    return src;
  };
  Value qProj = projection(c.qExp, c.qProjNorm, c.qClip);
  Value kProj = projection(c.kExp, c.kProjNorm, c.kClip);
  Value vProj = unclip(c.vExp.getSrc(), c.vClip);
  if (bool(c.qClip) != bool(c.kClip) || bool(c.kClip) != bool(c.vClip))
    return fail("clips must be on the query, the key and the value, or none");
  if (bool(c.qProjNorm) != bool(c.kProjNorm))
    return fail("projection norms must be on both the query and the key");
  for (Operation *norm : {c.qProjNorm, c.kProjNorm})
    if (norm && !paramOf(norm->getOperands().back()))
      return fail("projection norms must scale by weights");
  c.qLin = qProj.getDefiningOp<moe::LinearOp>();
  c.kLin = kProj.getDefiningOp<moe::LinearOp>();
  c.vLin = vProj.getDefiningOp<moe::LinearOp>();
  if (!c.qLin || !c.kLin || !c.vLin || !paramOf(c.qLin.getWeight()) ||
      !paramOf(c.kLin.getWeight()) || !paramOf(c.vLin.getWeight()))
    return fail("Q, K and V must be moe.linear of weights");
  for (moe::LinearOp lin : {c.qLin, c.kLin, c.vLin})
    if (lin.getBias() && !paramOf(lin.getBias()))
      return fail("Q, K and V biases must be weights");
  if (!att->hasOneUse())
    return fail("the attention output must feed one collapse");
  c.collapse = dyn_cast<tensor::CollapseShapeOp>(*att->user_begin());
  if (!c.collapse || !c.collapse->hasOneUse())
    return fail("the attention output must be collapsed into one linear");
  c.oLin = dyn_cast<moe::LinearOp>(*c.collapse->user_begin());
  if (!c.oLin || !paramOf(c.oLin.getWeight()))
    return fail("the output projection must be a moe.linear of a weight");
  // Its partial sums are all-reduced over TP: a bias there would be added
  // once per rank.
  if (c.oLin.getBias())
    return fail("the output projection must have no bias");
  for (Operation *user : c.kRope->getUsers())
    if (auto cache = dyn_cast<moe::KVCacheOp>(user))
      c.caches.push_back(cache);
  return c;
}

bool mf::isLatentAttention(moe::AttentionOp att) {
  return bool(att.getQuery().getDefiningOp<tensor::ConcatOp>());
}

FailureOr<LatentAttentionChain> mf::matchLatentAttention(moe::AttentionOp att) {
  LatentAttentionChain c;
  c.attention = att;
  auto fail = [&](StringRef what) -> FailureOr<LatentAttentionChain> {
    return att.emitError() << "partitioning: unexpected structure around "
                              "latent attention: "
                           << what;
  };
  // The query: [absorbed no-RoPE part, roped part].
  c.qCat = att.getQuery().getDefiningOp<tensor::ConcatOp>();
  if (!c.qCat || c.qCat.getInputs().size() != 2 || c.qCat.getDim() != 2)
    return fail("the query must concatenate two parts along the head dim");
  c.absorb = c.qCat.getInputs()[0].getDefiningOp<moe::HeadLinearOp>();
  c.qRope = c.qCat.getInputs()[1].getDefiningOp<moe::RoPEOp>();
  if (!c.absorb || !c.absorb.getTransposeWeight() || !c.qRope)
    return fail("the query must be [head_linear(q_nope, W_UK), rope(q_rope)]");
  c.qNope = c.absorb.getInput().getDefiningOp<tensor::ExtractSliceOp>();
  c.qRopeIn = c.qRope.getInput().getDefiningOp<tensor::ExtractSliceOp>();
  if (!c.qNope || !c.qRopeIn || c.qNope.getSource() != c.qRopeIn.getSource())
    return fail("q_nope and q_rope must be slices of one query");
  c.qExp = c.qNope.getSource().getDefiningOp<tensor::ExpandShapeOp>();
  if (!c.qExp)
    return fail("the query's heads must be split by tensor.expand_shape");
  c.qLin = c.qExp.getSrc().getDefiningOp<moe::LinearOp>();
  if (!c.qLin || !paramOf(c.qLin.getWeight()) || c.qLin.getBias())
    return fail("the query must be a moe.linear of a weight");
  // With a query LoRA, Wq reads the normalised q_a_proj.
  if (auto norm = c.qLin.getInput().getDefiningOp<moe::RMSNormOp>()) {
    c.qInLin = norm.getInput().getDefiningOp<moe::LinearOp>();
    if (!c.qInLin)
      return fail("a query LoRA must be a moe.linear, normalised");
  }
  // W_UK and W_UV: slices of kv_b_proj per head.
  c.wUK = c.absorb.getWeight().getDefiningOp<tensor::ExtractSliceOp>();
  if (!c.wUK)
    return fail("W_UK must be a slice of kv_b_proj");
  c.wkvExp = c.wUK.getSource().getDefiningOp<tensor::ExpandShapeOp>();
  if (!c.wkvExp || !paramOf(c.wkvExp.getSrc()))
    return fail("kv_b_proj must be a weight split per head");
  // The key and value: the latent, through a history in decode.
  Value key = att.getKey();
  if ((c.history = key.getDefiningOp<moe::KVHistoryOp>())) {
    if (att.getValue() != c.history.getValue() ||
        c.history.getStepKey() != c.history.getStepValue())
      return fail("a K/V history must give the latent as key and value");
    key = c.history.getStepKey();
  } else if (att.getValue() != key) {
    return fail("the latent must be both the key and the value");
  }
  auto kvCat = key.getDefiningOp<tensor::ConcatOp>();
  if (!kvCat || kvCat.getInputs().size() != 2)
    return fail("the latent must concatenate the latent and the RoPE key");
  for (Value part : kvCat.getInputs()) {
    Value v = part;
    if (auto rope = v.getDefiningOp<moe::RoPEOp>())
      v = rope.getInput();
    auto exp = v.getDefiningOp<tensor::ExpandShapeOp>();
    if (!exp)
      return fail("the latent's parts must be split by tensor.expand_shape");
    c.kvExps.push_back(exp);
    Value src = exp.getSrc();
    if (auto norm = src.getDefiningOp<moe::RMSNormOp>())
      src = norm.getInput();
    auto slice = src.getDefiningOp<tensor::ExtractSliceOp>();
    auto lin = slice ? slice.getSource().getDefiningOp<moe::LinearOp>()
                     : moe::LinearOp();
    if (!lin || (c.kvLin && lin != c.kvLin))
      return fail("the latent must be slices of one moe.linear");
    c.kvLin = lin;
  }
  // The output: each head's latent part up-projected, then Wo.
  // (Beside the slice, only reads of its token count.)
  for (Operation *user : att->getUsers()) {
    if (isa<tensor::DimOp>(user))
      continue;
    if (c.outSlice || !isa<tensor::ExtractSliceOp>(user))
      return fail("the attention output must feed one slice");
    c.outSlice = cast<tensor::ExtractSliceOp>(user);
  }
  c.up = c.outSlice && c.outSlice->hasOneUse()
             ? dyn_cast<moe::HeadLinearOp>(*c.outSlice->user_begin())
             : moe::HeadLinearOp();
  if (!c.up || c.up.getTransposeWeight() || !c.up->hasOneUse())
    return fail("the output must be head_linear(attention[.., :r], W_UV)");
  c.wUV = c.up.getWeight().getDefiningOp<tensor::ExtractSliceOp>();
  if (!c.wUV || c.wUV.getSource() != c.wkvExp.getResult())
    return fail("W_UV must be a slice of the same kv_b_proj");
  c.collapse = dyn_cast<tensor::CollapseShapeOp>(*c.up->user_begin());
  if (!c.collapse || !c.collapse->hasOneUse())
    return fail("the values must be collapsed into one linear");
  c.oLin = dyn_cast<moe::LinearOp>(*c.collapse->user_begin());
  if (!c.oLin || !paramOf(c.oLin.getWeight()) || c.oLin.getBias())
    return fail("the output projection must be a moe.linear of a weight, "
                "with no bias");
  return c;
}

SmallVector<moe::AttentionOp> mf::attentionsOf(ModuleOp module,
                                               bool overHistory) {
  SmallVector<moe::AttentionOp> attentions;
  module.walk([&](moe::AttentionOp op) {
    if (bool(op.getKey().getDefiningOp<moe::KVHistoryOp>()) == overHistory)
      attentions.push_back(op);
  });
  return attentions;
}

FailureOr<StepHead> mf::matchStepHead(moe::StepLogitsOp op, StringRef pass) {
  auto lin = op.getLogits().getDefiningOp<moe::LinearOp>();
  auto norm = lin ? lin.getInput().getDefiningOp<moe::RMSNormOp>() : nullptr;
  moe::ParamOp w = lin ? paramOf(lin.getWeight()) : nullptr;
  if (!norm || !w || !lin->hasOneUse() || !norm->hasOneUse())
    return op.emitError() << pass
                          << ": expected rms_norm -> linear (a moe.param) -> "
                             "step_logits";
  return StepHead{norm, lin, w};
}

std::pair<Value, Value> mf::takeStepHeadRows(OpBuilder &b, Location loc,
                                             Value x, Value positions) {
  int64_t dyn = ShapedType::kDynamic;
  auto posType = cast<RankedTensorType>(positions.getType()).clone({dyn});
  Value rows = moe::StepHeadRowsOp::create(b, loc, posType, positions);
  auto xType = cast<RankedTensorType>(x.getType());
  SmallVector<int64_t> shape(xType.getShape());
  shape[0] = dyn;
  Value taken = moe::TakeRowsOp::create(b, loc, xType.clone(shape), x, rows);
  Value takenPositions =
      moe::TakeRowsOp::create(b, loc, posType, positions, rows);
  return {taken, takenPositions};
}
