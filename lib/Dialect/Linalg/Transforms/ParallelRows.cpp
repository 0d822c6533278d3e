//===- ParallelRows.cpp - split the outer dim of linalg ops over threads --===//
//
// After the contraction kernels, what is left of the model's linalg ops on
// buffers is elementwise and data movement: the experts' gathers, SiLU and
// combine, fills, norms, the rope. `convert-linalg-to-loops` makes each a
// sequential loop nest, so one thread runs it while the others wait for the
// next parallel contraction. This pass tiles the outermost dim of each such
// op (when it is parallel and every output is indexed by it, so blocks write
// disjoint elements) into an `scf.parallel` over blocks of rows; the inner
// dims stay whole for the vectorizer. Ops already inside a parallel loop (a
// tile of attention) are left alone.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/Linalg/Transforms/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/PatternMatch.h"

#define DEBUG_TYPE "mf-linalg-parallel-rows"

namespace meshfold {
#define GEN_PASS_DEF_MFLINALGPARALLELROWSPASS
#include "meshfold/Dialect/Linalg/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;

namespace {
/// Whether blocks of `op`'s dim 0 can run at once: a parallel dim that
/// indexes every output, on buffers, in no parallel loop already, with a
/// body that writes no memory.
bool splittable(linalg::LinalgOp op) {
  if (!op.hasPureBufferSemantics() || op.getNumLoops() == 0 ||
      !linalg::isParallelIterator(op.getIteratorTypesArray()[0]))
    return false;
  if (op->getParentOfType<scf::ParallelOp>() ||
      op->getParentOfType<scf::ForallOp>())
    return false;
  for (OpOperand &out : op.getDpsInitsMutable()) {
    AffineMap map = op.getMatchingIndexingMap(&out);
    if (!llvm::any_of(map.getResults(), [](AffineExpr e) {
          auto d = dyn_cast<AffineDimExpr>(e);
          return d && d.getPosition() == 0;
        }))
      return false;
  }
  bool writes = false;
  op->walk([&](Operation *inner) {
    if (inner == op.getOperation())
      return;
    auto effects = dyn_cast<MemoryEffectOpInterface>(inner);
    if ((effects && effects.hasEffect<MemoryEffects::Write>()) ||
        (!effects && !inner->hasTrait<OpTrait::HasRecursiveMemoryEffects>() &&
         !isa<linalg::YieldOp>(inner)))
      writes = true;
  });
  return !writes;
}

/// Whether `op`'s loops run at least `minimum` iterations in all: an
/// i1 built before `op`.
Value enoughWork(OpBuilder &b, linalg::LinalgOp op, int64_t minimum) {
  Location loc = op.getLoc();
  Value total = arith::ConstantIndexOp::create(b, loc, 1);
  for (Range r : op.createLoopRanges(b, loc))
    total = arith::MulIOp::create(
        b, loc, total, getValueOrCreateConstantIndexOp(b, loc, r.size));
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, total,
                               arith::ConstantIndexOp::create(b, loc, minimum));
}

struct MFLinalgParallelRowsPass
    : public meshfold::impl::MFLinalgParallelRowsPassBase<
          MFLinalgParallelRowsPass> {
  using Base::Base;
  void runOnOperation() override {
    if (blocks < 1) {
      getOperation().emitError("mf-linalg-parallel-rows: blocks=")
          << static_cast<int64_t>(blocks) << " must be at least 1";
      return signalPassFailure();
    }
    if (minElements < 0) {
      getOperation().emitError("mf-linalg-parallel-rows: min-elements=")
          << static_cast<int64_t>(minElements) << " must not be negative";
      return signalPassFailure();
    }
    SmallVector<linalg::LinalgOp> ops;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (splittable(op))
        ops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (linalg::LinalgOp op : ops) {
      int64_t count = blocks;
      linalg::LinalgTilingOptions options;
      options.setLoopType(linalg::LinalgTilingLoopType::ParallelLoops);
      options.setTileSizeComputationFunction(
          [count](OpBuilder &b, Operation *target) {
            auto linalgOp = cast<linalg::LinalgOp>(target);
            Location loc = target->getLoc();
            OpFoldResult rowCount = linalgOp.createLoopRanges(b, loc)[0].size;
            // ceil(rows / blocks): at most `blocks` blocks, none empty; at
            // least 1 (a loop step), even when there are no rows.
            AffineExpr rows;
            bindSymbols(b.getContext(), rows);
            Value block = affine::makeComposedAffineApply(
                b, loc, rows.ceilDiv(count), {rowCount});
            SmallVector<Value, 4> sizes = {arith::MaxUIOp::create(
                b, loc, block, arith::ConstantIndexOp::create(b, loc, 1))};
            sizes.append(linalgOp.getNumLoops() - 1,
                         arith::ConstantIndexOp::create(b, loc, 0));
            return sizes;
          });
      rewriter.setInsertionPoint(op);
      if (minElements > 1) {
        // Too little work to be worth a fork and join of the threads (a
        // decode step's row): the op as it is, on the calling thread.
        auto choice = scf::IfOp::create(
            rewriter, op.getLoc(),
            enoughWork(rewriter, op, static_cast<int64_t>(minElements)),
            /*withElseRegion=*/true);
        rewriter.setInsertionPointToStart(choice.elseBlock());
        rewriter.clone(*op.getOperation());
        rewriter.moveOpBefore(op, choice.thenBlock()->getTerminator());
        rewriter.setInsertionPoint(op);
      }
      FailureOr<linalg::TiledLinalgOp> tiled =
          linalg::tileLinalgOp(rewriter, op, options);
      if (failed(tiled)) {
        op->emitError("mf-linalg-parallel-rows: could not tile the op");
        return signalPassFailure();
      }
      rewriter.eraseOp(op);
    }
  }
};
} // namespace
