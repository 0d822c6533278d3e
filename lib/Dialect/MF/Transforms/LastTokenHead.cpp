//===- LastTokenHead.cpp - the LM head on the last position only ----------===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"

#define DEBUG_TYPE "mf-last-token-head"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFLASTTOKENHEADPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
/// This rank's vocab slice of the LM head weight `w` ([V, d]) over TP.
Value tpVocabSlice(OpBuilder &b, moe::ParamOp w, int64_t tp) {
  auto type = w.getType();
  return shardParam(
      b, w,
      RankedTensorType::get({type.getDimSize(0) / tp, type.getDimSize(1)},
                            type.getElementType()),
      0, "attention", "tp", tp);
}

/// This rank's vocab slice over TP of the LM head weight `w` ([V, d]) that
/// the rank holds whole: a view of it, so the slice is not loaded again.
Value tpVocabView(OpBuilder &b, Location loc, Value w, int64_t tp) {
  auto type = cast<RankedTensorType>(w.getType());
  int64_t rows = type.getDimSize(0) / tp, d = type.getDimSize(1);
  Value offset = scaledCoord(b, loc, "attention", "tp", rows, 1);
  return tensor::ExtractSliceOp::create(
      b, loc, RankedTensorType::get({rows, d}, type.getElementType()), w,
      ArrayRef<OpFoldResult>{offset, b.getIndexAttr(0)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(rows), b.getIndexAttr(d)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(1), b.getIndexAttr(1)});
}

/// Whether this rank is TP rank 0 (the one that records the logits);
/// `zero` is an index 0.
Value isTPRankZero(OpBuilder &b, Location loc, Value zero) {
  return arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::eq,
      CoordOp::create(b, loc, b.getIndexType(), "attention", "tp"), zero);
}

struct MFLastTokenHeadPass
    : public mf::impl::MFLastTokenHeadPassBase<MFLastTokenHeadPass> {
  using Base::Base;

  /// A decode step's head (`rms_norm -> linear -> step_logits`, every row
  /// of the SP layout): the TP group gathers its rows and takes those that
  /// choose a token, each TP rank computes their V/TP logits with its vocab
  /// slice, and TP rank 0 gathers and records them.
  LogicalResult splitStepHead(moe::StepLogitsOp op, int64_t tp) {
    FailureOr<StepHead> head = matchStepHead(op, "mf-last-token-head");
    if (failed(head))
      return failure();
    moe::RMSNormOp norm = head->norm;
    moe::LinearOp lin = head->lin;
    auto sp = op.getPositions().getDefiningOp<SliceOp>();
    if (!sp || op.getValid())
      return op.emitError("mf-last-token-head: expected the step's logits "
                          "of the SP rows");
    int64_t vocab = lin.getType().getDimSize(1);
    if (vocab % tp != 0)
      return op.emitError() << "mf-last-token-head: the LM head's vocab ("
                            << vocab << ") must be divisible by TP=" << tp;
    OpBuilder b(op);
    Location loc = op.getLoc();
    Value x = norm.getInput();
    Value gathered = AllGatherOp::create(
        b, loc, x.getType(), x, b.getStringAttr("attention"),
        b.getStrArrayAttr({"tp"}), b.getI64IntegerAttr(0));
    auto [rows, positions] = takeStepHeadRows(b, loc, gathered, sp.getInput());
    Value normed = moe::RMSNormOp::create(
        b, loc, rows.getType(), rows, norm.getWeight(), norm.getEpsilonAttr());
    Type elt = lin.getType().getElementType();
    Value weight = tpVocabSlice(b, head->weight, tp);
    int64_t dyn = ShapedType::kDynamic;
    Value part = moe::LinearOp::create(
        b, loc, RankedTensorType::get({dyn, vocab / tp}, elt), normed, weight);
    // The gather stacks the TP ranks' [n, V/TP] slices, [TP * n, V/TP]:
    // seen as [TP, n, V/TP] and permuted to [n, TP, V/TP], they are the rows'
    // logits in vocab order.
    Value n = tensor::DimOp::create(b, loc, part, 0);
    Value stacked = GatherOp::create(
        b, loc, part.getType(), part, b.getStringAttr("attention"),
        b.getStrArrayAttr({"tp"}), b.getI64IntegerAttr(0),
        b.getI64IntegerAttr(0));
    Value blocks = tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get({tp, dyn, vocab / tp}, elt), stacked,
        SmallVector<ReassociationIndices>{{0, 1}, {2}},
        SmallVector<OpFoldResult>{b.getIndexAttr(tp), OpFoldResult(n),
                                  b.getIndexAttr(vocab / tp)});
    Value init = tensor::EmptyOp::create(
        b, loc, ArrayRef<int64_t>{dyn, tp, vocab / tp}, elt, ValueRange{n});
    Value rowsFirst = linalg::TransposeOp::create(b, loc, blocks, init,
                                                  ArrayRef<int64_t>{1, 0, 2})
                          .getResult()[0];
    Value all = tensor::CollapseShapeOp::create(
        b, loc, RankedTensorType::get({dyn, vocab}, elt), rowsFirst,
        SmallVector<ReassociationIndices>{{0}, {1, 2}});
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    moe::StepLogitsOp::create(b, loc, all, positions,
                              isTPRankZero(b, loc, zero));
    eraseAndClean({op, lin, norm});
    return success();
  }
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<MeshLayout> layout = requireLayout(module, "mf-last-token-head");
    if (failed(layout))
      return signalPassFailure();
    int64_t tp = layout->axisSize("tp");
    SmallVector<moe::LMHeadOp> heads;
    module.walk([&](moe::LMHeadOp op) { heads.push_back(op); });
    SmallVector<moe::StepLogitsOp> steps;
    module.walk([&](moe::StepLogitsOp op) { steps.push_back(op); });
    if (tp > 1)
      for (moe::StepLogitsOp op : steps)
        if (failed(splitStepHead(op, tp)))
          return signalPassFailure();
    for (moe::LMHeadOp head : heads) {
      auto norm = head.getInput().getDefiningOp<moe::RMSNormOp>();
      if (!norm || !head->hasOneUse() ||
          !isa<moe::LogitsOp>(*head->user_begin())) {
        head.emitError("mf-last-token-head: expected rms_norm -> lm_head -> "
                       "logits");
        return signalPassFailure();
      }
      auto logits = cast<moe::LogitsOp>(*head->user_begin());
      moe::ParamOp w = paramOf(head.getWeight());
      int64_t vocab = head.getType().getDimSize(0);
      if (!w || vocab % tp != 0) {
        head.emitError() << "mf-last-token-head: the LM head weight must be a "
                            "moe.param whose vocab ("
                         << vocab << ") TP=" << tp << " divides";
        return signalPassFailure();
      }
      OpBuilder b(head);
      Location loc = head.getLoc();
      // Prompt logprobs are prefill's; a decode step's rows are new tokens,
      // whose logits are the step's.
      bool isStep = head->getParentOfType<func::FuncOp>()->hasAttr(
          moe::getDecodeStepAttrName());
      bool wholeHead = promptLogprobs && !isStep;
      if (wholeHead) {
        // Every position this rank holds, with the whole LM head.
        auto nType = cast<RankedTensorType>(norm.getType());
        auto allType = RankedTensorType::get({nType.getDimSize(0), vocab},
                                             nType.getElementType());
        Value all = moe::LinearOp::create(b, loc, allType, norm.getResult(),
                                          head.getWeight());
        moe::PromptLogitsOp::create(b, loc, all, head.getPositions());
      }
      auto hType = cast<RankedTensorType>(norm.getInput().getType());
      Type elt = hType.getElementType();
      auto rowType = RankedTensorType::get({1, hType.getDimSize(1)}, elt);
      auto flagType = RankedTensorType::get({1}, elt);
      // Pick the row of position T-1 before the norm: one row, not T.
      auto take = moe::TakePositionOp::create(
          b, loc, rowType, flagType, norm.getInput(), head.getPositions(),
          head.getLast());
      Value row = take.getRow(), found = take.getFound();
      ArrayAttr tpAxes = b.getStrArrayAttr({"tp"});
      if (tp > 1) {
        // The holder's TP partners get the row (zero rows elsewhere).
        row = AllReduceOp::create(b, loc, ValueRange{row}, "attention", {"tp"})
                  .getResult(0);
        found =
            AllReduceOp::create(b, loc, ValueRange{found}, "attention", {"tp"})
                .getResult(0);
      }
      Value normed = moe::RMSNormOp::create(
          b, loc, rowType, row, norm.getWeight(), norm.getEpsilonAttr());
      Value lastI64 =
          arith::IndexCastOp::create(b, loc, b.getI64Type(), head.getLast());
      Value onePos =
          tensor::FromElementsOp::create(b, loc, ValueRange{lastI64});
      Value weight = head.getWeight();
      auto partType = RankedTensorType::get({vocab / tp}, elt);
      // With the whole head at hand, the rank's slice is a view of it.
      if (tp > 1)
        weight = wholeHead ? tpVocabView(b, loc, head.getWeight(), tp)
                           : tpVocabSlice(b, w, tp);
      Value part = moe::LMHeadOp::create(b, loc, partType, normed, weight,
                                         onePos, head.getLast());
      Value all = part;
      if (tp > 1)
        all = GatherOp::create(b, loc, head.getType(), part,
                               b.getStringAttr("attention"), tpAxes,
                               b.getI64IntegerAttr(0), b.getI64IntegerAttr(0));
      // The holder's group records the logits, on TP rank 0.
      Value zero = arith::ConstantIndexOp::create(b, loc, 0);
      Value flag = tensor::ExtractOp::create(b, loc, found, ValueRange{zero});
      Value valid = arith::CmpFOp::create(
          b, loc, arith::CmpFPredicate::OGT, flag,
          arith::ConstantOp::create(b, loc, b.getFloatAttr(elt, 0.5)));
      if (tp > 1)
        valid =
            arith::AndIOp::create(b, loc, valid, isTPRankZero(b, loc, zero));
      b.setInsertionPoint(logits);
      moe::LogitsOp::create(b, logits.getLoc(), all, valid);
      eraseAndClean({logits, head});
    }
  }
};
} // namespace
