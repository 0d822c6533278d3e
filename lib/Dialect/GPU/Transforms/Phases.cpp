//===- Phases.cpp - helpers of the thread-phase passes --------------------===//

#include "meshfold/Dialect/GPU/Transforms/Phases.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

LogicalResult meshfold::checkThreadsPerBlock(Operation *op, int64_t threads) {
  if (threads >= 1 && threads <= 1024 && llvm::isPowerOf2_64(threads))
    return success();
  return op->emitError()
         << "threads-per-block must be a power of two in [1, 1024], got "
         << threads;
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
