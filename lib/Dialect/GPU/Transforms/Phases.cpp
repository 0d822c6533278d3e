//===- Phases.cpp - helpers of the thread-phase passes --------------------===//

#include "meshfold/Dialect/GPU/Transforms/Phases.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

LogicalResult meshfold::checkThreadsPerBlock(Operation *op, int64_t threads) {
  if (threads >= 1 && threads <= 1024 && llvm::isPowerOf2_64(threads))
    return success();
  return op->emitError()
         << "threads-per-block must be a power of two in [1, 1024], got "
         << threads;
}

std::pair<scf::ParallelOp, SmallVector<Value>>
meshfold::createBlockLoop(OpBuilder &b, Location loc, ValueRange lbs,
                          ValueRange ubs, ValueRange steps, int64_t threads) {
  SmallVector<Value> keptLbs, keptUbs, keptSteps;
  SmallVector<bool> kept;
  for (auto [lb, ub, step] : llvm::zip(lbs, ubs, steps)) {
    std::optional<int64_t> l = getConstantIntValue(lb),
                           u = getConstantIntValue(ub),
                           st = getConstantIntValue(step);
    bool once = l && u && st && *st > 0 && *u > *l && *u - *l <= *st;
    kept.push_back(!once);
    if (once)
      continue;
    keptLbs.push_back(lb);
    keptUbs.push_back(ub);
    keptSteps.push_back(step);
  }
  if (keptLbs.empty()) {
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    keptLbs = {zero};
    keptUbs = {one};
    keptSteps = {one};
  }
  auto loop = scf::ParallelOp::create(b, loc, keptLbs, keptUbs, keptSteps);
  loop->setAttr(kPhasesAttrName, b.getI64IntegerAttr(threads));
  SmallVector<Value> ivs;
  unsigned next = 0;
  for (auto [lb, keep] : llvm::zip(lbs, kept))
    ivs.push_back(keep ? loop.getInductionVars()[next++] : lb);
  return {loop, ivs};
}

SmallVector<Value> meshfold::delinearizeIndex(OpBuilder &b, Location loc,
                                              Value linear,
                                              ArrayRef<Value> sizes) {
  SmallVector<Value> coords(sizes.size());
  for (int64_t d = sizes.size() - 1; d > 0; --d) {
    coords[d] = arith::RemUIOp::create(b, loc, linear, sizes[d]);
    linear = arith::DivUIOp::create(b, loc, linear, sizes[d]);
  }
  if (!sizes.empty())
    coords[0] = linear;
  return coords;
}
