//===- FillsAtUse.cpp - one linalg.fill per destination it initialises ----===//
//
// CSE merges the zero fills of equal shape that every contraction and
// reduction starts from; One-Shot Bufferize then keeps the one filled buffer
// for the whole function and copies it for each op that writes it. Each op
// that writes a shared fill's result gets its own tensor.empty and fill,
// right before it, which bufferization fills in place.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/Linalg/Transforms/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"
#include "mlir/Interfaces/LoopLikeInterface.h"

#define DEBUG_TYPE "mf-fills-at-use"

namespace meshfold {
#define GEN_PASS_DEF_MFFILLSATUSEPASS
#include "meshfold/Dialect/Linalg/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;

namespace {
/// Whether `use` hands the tensor to an op that writes it in place once
/// bufferized: a destination-style op's init, or the initial value of a
/// loop's carried tensor (scf.for's iter_args, scf.forall's shared_outs).
bool writes(OpOperand &use) {
  Operation *user = use.getOwner();
  if (auto dps = dyn_cast<DestinationStyleOpInterface>(user))
    return dps.isDpsInit(&use);
  if (auto loop = dyn_cast<LoopLikeOpInterface>(user))
    return llvm::any_of(loop.getInitsMutable(),
                        [&](OpOperand &init) { return &init == &use; });
  return false;
}

struct MFFillsAtUsePass
    : public meshfold::impl::MFFillsAtUsePassBase<MFFillsAtUsePass> {
  /// A copy of `fill` and of its tensor.empty, right before `user`.
  static Value cloneBefore(linalg::FillOp fill, Operation *user) {
    OpBuilder b(user);
    IRMapping map;
    b.clone(*fill.getOutputs()[0].getDefiningOp(), map);
    return b.clone(*fill, map)->getResult(0);
  }

  void runOnOperation() override {
    SmallVector<linalg::FillOp> shared;
    getOperation().walk([&](linalg::FillOp fill) {
      if (fill.hasPureTensorSemantics() &&
          fill.getOutputs()[0].getDefiningOp<tensor::EmptyOp>() &&
          !fill->getResult(0).hasOneUse())
        shared.push_back(fill);
    });
    for (linalg::FillOp fill : shared) {
      for (OpOperand &use :
           llvm::make_early_inc_range(fill->getResult(0).getUses()))
        if (writes(use))
          use.set(cloneBefore(fill, use.getOwner()));
      if (!fill->use_empty())
        continue;
      Operation *empty = fill.getOutputs()[0].getDefiningOp();
      fill->erase();
      if (empty->use_empty())
        empty->erase();
    }
  }
};
} // namespace
