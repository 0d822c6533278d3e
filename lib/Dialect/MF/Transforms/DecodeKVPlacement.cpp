//===- DecodeKVPlacement.cpp - a decode step's rows over the CP ranks -----===//
//
// Prefill gives each CP rank zigzag chunks of the prompt; a decode step's
// new positions are dealt round-robin (mf.step_rows), so the K/V each rank
// appends to its cache keeps the ranks' shares even.
//
//===----------------------------------------------------------------------===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#define DEBUG_TYPE "mf-decode-kv-placement"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFDECODEKVPLACEMENTPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
/// The position padding rows get: past every real position (so the causal
/// mask hides their keys, the cache drops them and the LM head never takes
/// them) and small enough for RoPE's angles.
constexpr int64_t kPadPosition = int64_t(1) << 30;

struct MFDecodeKVPlacementPass
    : public mf::impl::MFDecodeKVPlacementPassBase<MFDecodeKVPlacementPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<MeshLayout> layout =
        requireLayout(module, "mf-decode-kv-placement");
    if (failed(layout))
      return signalPassFailure();
    int64_t cp = layout->axisSize("cp"), tp = layout->axisSize("tp");
    if (cp == 1 && tp == 1)
      return;
    for (func::FuncOp fn : module.getOps<func::FuncOp>()) {
      if (!fn->hasAttr(moe::getDecodeStepAttrName()))
        continue;
      if (!layout->hasAxis("cp")) {
        fn.emitError("mf-decode-kv-placement: the attention mesh needs a cp "
                     "axis (size 1 is fine) to place tokens");
        return signalPassFailure();
      }
      if (failed(place(fn, tp)))
        return signalPassFailure();
    }
  }

  LogicalResult place(func::FuncOp fn, int64_t tp) {
    if (fn.getNumArguments() != 2 || fn.isExternal())
      return fn.emitError("mf-decode-kv-placement: a decode step takes (token "
                          "ids, positions)");
    Value tokens = fn.getArgument(0), positions = fn.getArgument(1);
    auto posType = dyn_cast<RankedTensorType>(positions.getType());
    auto tokType = dyn_cast<RankedTensorType>(tokens.getType());
    if (!posType || !tokType || posType.getRank() != 1 ||
        tokType.getRank() != 1 || !posType.isDynamicDim(0))
      return fn.emitError("mf-decode-kv-placement: the step's token ids and "
                          "positions must be 1-D with a dynamic row count");
    OpBuilder b = OpBuilder::atBlockBegin(&fn.getBody().front());
    Location loc = fn.getLoc();
    Value rows = StepRowsOp::create(b, loc, posType, positions, "attention",
                                    "cp", tp, byPlace);
    Value mine = TakeOp::create(b, loc, posType, positions, rows, kPadPosition);
    Value ids = TakeOp::create(b, loc, tokType, tokens, rows, 0);
    // The layers, the cache and the LM head's rows follow the rank's
    // positions; the LM head's last position stays the step's (read by
    // tensor.extract).
    for (OpOperand &use : llvm::make_early_inc_range(positions.getUses())) {
      Operation *user = use.getOwner();
      if (user == rows.getDefiningOp() || user == mine.getDefiningOp() ||
          isa<tensor::DimOp, tensor::ExtractOp>(user))
        continue;
      use.set(mine);
    }
    for (OpOperand &use : llvm::make_early_inc_range(tokens.getUses()))
      if (isa<moe::EmbedOp>(use.getOwner()))
        use.set(ids);
    return success();
  }
};
} // namespace
