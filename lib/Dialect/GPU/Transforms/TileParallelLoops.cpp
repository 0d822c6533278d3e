//===- TileParallelLoops.cpp - scf.parallel into blocks of threads --------===//
//
// Prepares the loops of lowered linalg ops for gpu-map-parallel-loops and
// convert-parallel-loops-to-gpu: each outermost scf.parallel becomes a loop
// over blocks around a loop over the threads of a block.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/GPU/Transforms/Passes.h"
#include "meshfold/Dialect/GPU/Transforms/Phases.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/IR/Builders.h"

#include "llvm/Support/MathExtras.h"

#define DEBUG_TYPE "mf-gpu-tile-parallel-loops"

namespace meshfold {
#define GEN_PASS_DEF_MFGPUTILEPARALLELLOOPSPASS
#include "meshfold/Dialect/GPU/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;

namespace {
/// The number of hardware thread ids (x, y, z).
constexpr unsigned kThreadDims = 3;

/// Tile sizes for `op`: threads go to the innermost dims first, a static
/// extent n takes at most PowerOf2Ceil(n) of them.
SmallVector<int64_t> threadTileSizes(scf::ParallelOp op,
                                     int64_t threadsPerBlock) {
  unsigned rank = op.getNumLoops();
  SmallVector<int64_t> sizes(rank, 1);
  int64_t budget = threadsPerBlock;
  for (unsigned k = 0; k < rank && k < kThreadDims && budget > 1; ++k) {
    unsigned d = rank - 1 - k;
    int64_t take = budget;
    std::optional<int64_t> lb = getConstantIntValue(op.getLowerBound()[d]);
    std::optional<int64_t> ub = getConstantIntValue(op.getUpperBound()[d]);
    std::optional<int64_t> step = getConstantIntValue(op.getStep()[d]);
    if (lb && ub && step && *step > 0) {
      int64_t trip = std::max<int64_t>(1, (*ub - *lb + *step - 1) / *step);
      take = std::min<int64_t>(budget, llvm::PowerOf2Ceil(trip));
    }
    sizes[d] = take;
    budget /= take;
  }
  return sizes;
}

/// Puts `op` under an scf.if that skips it when a dynamic dim is empty (a
/// rank may hold no tokens): a launch with a zero grid size is an error.
void guardEmptyIterationSpace(scf::ParallelOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value cond;
  for (auto [lb, ub] : llvm::zip(op.getLowerBound(), op.getUpperBound())) {
    std::optional<int64_t> l = getConstantIntValue(lb);
    std::optional<int64_t> u = getConstantIntValue(ub);
    if (l && u)
      continue;
    Value nonEmpty =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, lb, ub);
    cond = cond ? arith::AndIOp::create(b, loc, cond, nonEmpty) : nonEmpty;
  }
  if (!cond)
    return;
  auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
  op->moveBefore(ifOp.thenBlock()->getTerminator());
}

/// True when `forOp` (or a loop nested in it) writes memory.
bool writesMemory(scf::ForOp forOp) {
  return forOp
      ->walk([](Operation *op) {
        return isa<memref::StoreOp>(op) ? WalkResult::interrupt()
                                        : WalkResult::advance();
      })
      .wasInterrupted();
}

/// memref.copy -> scf.parallel over the target's dims, one load and store
/// per element (any layouts).
void copyToParallelLoop(memref::CopyOp copy) {
  OpBuilder b(copy);
  Location loc = copy.getLoc();
  Value src = copy.getSource(), dst = copy.getTarget();
  auto type = cast<MemRefType>(dst.getType());
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  SmallVector<Value> lbs, ubs, steps;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    lbs.push_back(zero);
    ubs.push_back(memref::DimOp::create(b, loc, dst, d));
    steps.push_back(one);
  }
  if (type.getRank() == 0) {
    lbs.push_back(zero);
    ubs.push_back(one);
    steps.push_back(one);
  }
  int64_t rank = type.getRank();
  scf::ParallelOp::create(b, loc, lbs, ubs, steps,
                          [&](OpBuilder &nb, Location l, ValueRange ivs) {
                            ValueRange at = rank == 0 ? ValueRange() : ivs;
                            Value v = memref::LoadOp::create(nb, l, src, at);
                            memref::StoreOp::create(nb, l, v, dst, at);
                          });
  copy.erase();
}

struct MFGPUTileParallelLoopsPass
    : public meshfold::impl::MFGPUTileParallelLoopsPassBase<
          MFGPUTileParallelLoopsPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(meshfold::checkThreadsPerBlock(getOperation(), threadsPerBlock)))
      return signalPassFailure();
    SmallVector<memref::CopyOp> copies;
    getOperation().walk([&](memref::CopyOp copy) { copies.push_back(copy); });
    for (memref::CopyOp copy : copies)
      copyToParallelLoop(copy);

    // Sequential nests that write memory and hold no parallel loop (pure
    // reductions) become a one-thread parallel loop.
    SmallVector<scf::ForOp> sequential;
    getOperation().walk([&](scf::ForOp forOp) {
      if (forOp->getParentOfType<scf::ForOp>() ||
          forOp->getParentOfType<scf::ParallelOp>() ||
          forOp->getParentOfType<gpu::LaunchOp>())
        return;
      bool hasParallel = false;
      forOp->walk([&](scf::ParallelOp) { hasParallel = true; });
      if (!hasParallel && forOp->use_empty() && writesMemory(forOp))
        sequential.push_back(forOp);
    });
    for (scf::ForOp forOp : sequential) {
      OpBuilder b(forOp);
      Location loc = forOp.getLoc();
      Value zero = arith::ConstantIndexOp::create(b, loc, 0);
      Value one = arith::ConstantIndexOp::create(b, loc, 1);
      auto wrapper = scf::ParallelOp::create(
          b, loc, ValueRange{zero}, ValueRange{one}, ValueRange{one},
          [](OpBuilder &, Location, ValueRange) {});
      forOp->moveBefore(wrapper.getBody()->getTerminator());
    }

    SmallVector<scf::ParallelOp> outermost;
    getOperation().walk([&](scf::ParallelOp op) {
      // Block loops of thread phases are tiled already.
      if (!op->getParentOfType<scf::ParallelOp>() &&
          !op->hasAttr(meshfold::kPhasesAttrName))
        outermost.push_back(op);
    });
    for (scf::ParallelOp op : outermost) {
      guardEmptyIterationSpace(op);
      scf::tileParallelLoop(op, threadTileSizes(op, threadsPerBlock),
                            /*noMinMaxBounds=*/true);
    }
  }
};
} // namespace
