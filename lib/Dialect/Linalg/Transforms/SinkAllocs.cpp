//===- SinkAllocs.cpp - each memref.alloc right before its first use ------===//
//
// Bufferization allocates where a tensor.empty stood, and those gather early
// in a function; a buffer then lives beside buffers it never overlaps. Each
// memref.alloc moves down its block to right before the first op that uses
// the buffer, so that it is live from its first write to its last read.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/Linalg/Transforms/Passes.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"

#define DEBUG_TYPE "mf-sink-allocs"

namespace meshfold {
#define GEN_PASS_DEF_MFSINKALLOCSPASS
#include "meshfold/Dialect/Linalg/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;

namespace {
/// The first op of `alloc`'s block that uses its buffer or holds a use in
/// its regions; null when none does.
Operation *firstUser(memref::AllocOp alloc) {
  Block *block = alloc->getBlock();
  Operation *first = nullptr;
  for (Operation *user : alloc->getUsers()) {
    Operation *op = block->findAncestorOpInBlock(*user);
    if (op && (!first || op->isBeforeInBlock(first)))
      first = op;
  }
  return first;
}

struct MFSinkAllocsPass
    : public meshfold::impl::MFSinkAllocsPassBase<MFSinkAllocsPass> {
  void runOnOperation() override {
    SmallVector<memref::AllocOp> allocs;
    getOperation().walk(
        [&](memref::AllocOp alloc) { allocs.push_back(alloc); });
    for (memref::AllocOp alloc : allocs)
      if (Operation *first = firstUser(alloc))
        alloc->moveBefore(first);
  }
};
} // namespace
