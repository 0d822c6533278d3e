//===- SplitPipeline.cpp - layers to pipeline stages ----------------------===//

#include "PartitionUtils.h"
#include "meshfold/Dialect/MF/Transforms/Passes.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"

#define DEBUG_TYPE "mf-split-pipeline"

namespace meshfold::mf {
#define GEN_PASS_DEF_MFSPLITPIPELINEPASS
#include "meshfold/Dialect/MF/Transforms/Passes.h.inc"
} // namespace meshfold::mf

using namespace mlir;
using namespace meshfold;
using namespace meshfold::mf;

namespace {
SmallVector<moe::LayerOp> topLevelLayers(func::FuncOp fn) {
  SmallVector<moe::LayerOp> layers;
  for (Operation &op : fn.getBody().front())
    if (auto layer = dyn_cast<moe::LayerOp>(op))
      layers.push_back(layer);
  return layers;
}

/// Keeps layers [first, last] of the clone `fn`: earlier layers are replaced
/// by a receive from the previous stage, later ones (and the head) by a send
/// to the next.
LogicalResult keepStage(func::FuncOp fn, int64_t first, int64_t last,
                        bool hasPrev, bool hasNext) {
  SmallVector<moe::LayerOp> layers = topLevelLayers(fn);
  moe::LayerOp firstLayer = layers[first], lastLayer = layers[last];
  if (hasNext) {
    OpBuilder b(lastLayer->getContext());
    b.setInsertionPointAfter(lastLayer);
    Value h = lastLayer.getResult(0);
    SendOp::create(b, lastLayer.getLoc(), h, "attention", "pp", 1);
    // Everything after the stage's last layer that has an effect goes.
    SmallVector<Operation *> tail;
    for (Operation *op = lastLayer->getNextNode(); op; op = op->getNextNode())
      if (!isa<SendOp, func::ReturnOp>(op) && !isPure(op))
        tail.push_back(op);
    for (Operation *op : llvm::reverse(tail)) {
      op->dropAllUses();
      op->erase();
    }
  }
  if (hasPrev) {
    OpBuilder b(firstLayer);
    Location loc = firstLayer.getLoc();
    Value h = firstLayer.getInputs()[0];
    // The stage's tokens are those of its positions (operand 1).
    Value t = tensor::DimOp::create(b, loc, firstLayer.getInputs()[1], 0);
    auto type = cast<RankedTensorType>(h.getType());
    Value recv =
        RecvOp::create(b, loc, type, ValueRange{t}, "attention", "pp", -1);
    firstLayer->setOperand(0, recv);
    for (int64_t i = first - 1; i >= 0; --i) {
      layers[i]->dropAllUses();
      layers[i]->erase();
    }
  }
  removeDeadOps(fn.getBody());
  return success();
}

struct MFSplitPipelinePass
    : public mf::impl::MFSplitPipelinePassBase<MFSplitPipelinePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<MeshLayout> layout = requireLayout(module, "mf-split-pipeline");
    if (failed(layout))
      return signalPassFailure();
    int64_t pp = layout->axisSize("pp");
    if (pp == 1)
      return;
    // The entry and the decode step (either may be alone), each split the
    // same way.
    SmallVector<func::FuncOp> entries;
    if (auto entry = module.lookupSymbol<func::FuncOp>(entryName))
      entries.push_back(entry);
    for (func::FuncOp fn : module.getOps<func::FuncOp>())
      if (fn->hasAttr(moe::getDecodeStepAttrName()) &&
          fn.getSymName() != entryName)
        entries.push_back(fn);
    if (entries.empty()) {
      module.emitError() << "mf-split-pipeline: no entry function @"
                         << entryName << " (nor a decode step)";
      return signalPassFailure();
    }
    for (func::FuncOp fn : entries)
      if (failed(split(fn, pp)))
        return signalPassFailure();
  }

  LogicalResult split(func::FuncOp entry, int64_t pp) {
    StringRef name = entry.getSymName();
    if (entry.getNumResults() != 0)
      return entry.emitError("mf-split-pipeline: the entry must return "
                             "nothing (its outputs are moe.kv_cache and "
                             "moe.logits)");
    int64_t numLayers = topLevelLayers(entry).size();
    if (numLayers % pp != 0 || numLayers == 0)
      return entry.emitError()
             << "plan rule 'pp-layers': PP=" << pp
             << " must divide the number of layers (" << numLayers << ")";
    int64_t per = numLayers / pp;

    OpBuilder b(entry.getContext());
    SmallVector<func::FuncOp> stages;
    for (int64_t s = 0; s < pp; ++s) {
      b.setInsertionPointAfter(stages.empty() ? entry : stages.back());
      auto stage = cast<func::FuncOp>(b.clone(*entry));
      stage.setSymName((name + "_stage" + Twine(s)).str());
      stage.setPrivate();
      stage->removeAttr("llvm.emit_c_interface");
      if (failed(
              keepStage(stage, s * per, (s + 1) * per - 1, s > 0, s + 1 < pp)))
        return failure();
      stages.push_back(stage);
    }

    // The entry: run this rank's stage.
    Block &body = entry.getBody().front();
    SmallVector<Value> args(body.getArguments());
    body.clear();
    b.setInsertionPointToEnd(&body);
    Location loc = entry.getLoc();
    Value coord = CoordOp::create(b, loc, b.getIndexType(), "attention", "pp");
    SmallVector<int64_t> cases;
    for (int64_t s = 0; s < pp; ++s)
      cases.push_back(s);
    auto sw = scf::IndexSwitchOp::create(b, loc, TypeRange{}, coord, cases,
                                         cases.size());
    for (int64_t s = 0; s < pp; ++s) {
      Block *blk = b.createBlock(&sw.getCaseRegions()[s]);
      b.setInsertionPointToEnd(blk);
      func::CallOp::create(b, loc, stages[s], args);
      scf::YieldOp::create(b, loc);
    }
    b.createBlock(&sw.getDefaultRegion());
    scf::YieldOp::create(b, loc);
    b.setInsertionPointAfter(sw);
    func::ReturnOp::create(b, loc);
    return success();
  }
};
} // namespace
