//===- StepHeadRows.cpp - a decode step's LM head on its choosing rows ----===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#define DEBUG_TYPE "mf-step-head-rows"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFSTEPHEADROWSPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
/// Whether the head of `op` already computes the taken rows only (a TP
/// group's split head, after `mf-last-token-head`).
bool alreadyTaken(moe::StepLogitsOp op) {
  return isa_and_present<moe::TakeRowsOp>(op.getPositions().getDefiningOp());
}

/// Rebuilds the head of `op` on the rows that choose a token, at `op`
/// (where the rows, their positions and the weights are all defined).
LogicalResult narrowStepHead(moe::StepLogitsOp op) {
  FailureOr<StepHead> head = matchStepHead(op, "mf-step-head-rows");
  if (failed(head))
    return failure();
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto [x, positions] =
      takeStepHeadRows(b, loc, head->norm.getInput(), op.getPositions());
  Value normed =
      moe::RMSNormOp::create(b, loc, x.getType(), x, head->norm.getWeight(),
                             head->norm.getEpsilonAttr());
  auto logitsType = cast<RankedTensorType>(head->lin.getType());
  Value logits = moe::LinearOp::create(
      b, loc,
      logitsType.clone({ShapedType::kDynamic, logitsType.getDimSize(1)}),
      normed, head->lin.getWeight());
  moe::StepLogitsOp::create(b, loc, logits, positions, op.getValid());
  eraseAndClean({op, head->lin, head->norm});
  return success();
}

struct MFStepHeadRowsPass
    : public mf::impl::MFStepHeadRowsPassBase<MFStepHeadRowsPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<moe::StepLogitsOp> steps;
    getOperation().walk([&](moe::StepLogitsOp op) {
      if (!alreadyTaken(op))
        steps.push_back(op);
    });
    for (moe::StepLogitsOp op : steps)
      if (failed(narrowStepHead(op)))
        return signalPassFailure();
  }
};
} // namespace
