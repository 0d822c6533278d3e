//===- ZigzagCP.cpp - zigzag context parallelism --------------------------===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#define DEBUG_TYPE "mf-zigzag-cp"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFZIGZAGCPPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
struct MFZigzagCPPass : public mf::impl::MFZigzagCPPassBase<MFZigzagCPPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<MeshLayout> layout = requireLayout(module, "mf-zigzag-cp");
    if (failed(layout))
      return signalPassFailure();
    int64_t cp = layout->axisSize("cp"), tp = layout->axisSize("tp");
    if (cp == 1 && tp == 1)
      return;
    if (!layout->hasAxis("cp")) {
      module.emitError("mf-zigzag-cp: the attention mesh needs a cp axis "
                       "(size 1 is fine) to place tokens");
      return signalPassFailure();
    }
    // Chunks must split evenly over CP ranks and then over their TP ranks.
    int64_t padTo = 2 * cp * tp;
    SmallVector<moe::PositionsOp> positions;
    module.walk([&](moe::PositionsOp op) { positions.push_back(op); });
    for (moe::PositionsOp op : positions) {
      OpBuilder b(op);
      Location loc = op.getLoc();
      Value tokens = op.getTokens();
      Value t = tensor::DimOp::create(b, loc, tokens, 0);
      auto posType = RankedTensorType::get({ShapedType::kDynamic},
                                           op.getType().getElementType());
      Value mine = ZigzagPositionsOp::create(b, loc, posType, t, "attention",
                                             "cp", padTo);
      Value myTokens = TakeOp::create(b, loc, posType, tokens, mine, 0);
      // The embedding reads this rank's tokens; everything indexed by token
      // follows from it and from the positions.
      for (OpOperand &use : llvm::make_early_inc_range(tokens.getUses()))
        if (isa<moe::EmbedOp>(use.getOwner()))
          use.set(myTokens);
      op.replaceAllUsesWith(mine);
      op.erase();
    }
  }
};
} // namespace
