//===- LastTokenHead.cpp - the LM head on the last position only ----------===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#define DEBUG_TYPE "mf-last-token-head"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFLASTTOKENHEADPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
struct MFLastTokenHeadPass
    : public mf::impl::MFLastTokenHeadPassBase<MFLastTokenHeadPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<MeshLayout> layout = requireLayout(module, "mf-last-token-head");
    if (failed(layout))
      return signalPassFailure();
    int64_t tp = layout->axisSize("tp");
    SmallVector<moe::LMHeadOp> heads;
    module.walk([&](moe::LMHeadOp op) { heads.push_back(op); });
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
      if (promptLogprobs && !isStep) {
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
      if (tp > 1)
        weight = shardParam(
            b, w,
            RankedTensorType::get({vocab / tp, w.getType().getDimSize(1)}, elt),
            0, "attention", "tp", tp);
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
      if (tp > 1) {
        Value rank0 = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::eq,
            CoordOp::create(b, loc, b.getIndexType(), "attention", "tp"), zero);
        valid = arith::AndIOp::create(b, loc, valid, rank0);
      }
      b.setInsertionPoint(logits);
      moe::LogitsOp::create(b, logits.getLoc(), all, valid);
      eraseAndClean({logits, head});
    }
  }
};
} // namespace
