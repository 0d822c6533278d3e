//===- BufferReadsAtUse.cpp - one to_buffer per use, right before it ------===//
//
// A runtime call reads a tensor through `bufferization.to_buffer` and casts
// of its result. CSE merges identical reads, and One-Shot Bufferize then
// counts only the first as a read of the tensor: a later call may see a
// buffer an op in between reused in place. Each use gets its own copy of
// the read, right before the op that uses it.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/Linalg/Transforms/Passes.h"

#define DEBUG_TYPE "mf-buffer-reads-at-use"

namespace meshfold {
#define GEN_PASS_DEF_MFBUFFERREADSATUSEPASS
#include "meshfold/Dialect/Linalg/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;

namespace {
struct MFBufferReadsAtUsePass
    : public meshfold::impl::MFBufferReadsAtUsePassBase<
          MFBufferReadsAtUsePass> {
  /// Gives every use reached from `value` through memref.casts (`chain`,
  /// from the to_buffer on) its own copy of the chain, right before the
  /// using op.
  void rematerialize(Value value, SmallVectorImpl<Operation *> &chain) {
    for (OpOperand &use : llvm::make_early_inc_range(value.getUses())) {
      Operation *user = use.getOwner();
      if (auto cast = dyn_cast<memref::CastOp>(user)) {
        chain.push_back(cast);
        rematerialize(cast.getResult(), chain);
        chain.pop_back();
        continue;
      }
      OpBuilder b(user);
      IRMapping map;
      Operation *last = nullptr;
      for (Operation *op : chain)
        last = b.clone(*op, map);
      use.set(last->getResult(0));
    }
  }

  void runOnOperation() override {
    SmallVector<bufferization::ToBufferOp> reads;
    getOperation().walk(
        [&](bufferization::ToBufferOp op) { reads.push_back(op); });
    for (bufferization::ToBufferOp read : reads) {
      SmallVector<Operation *> chain = {read};
      rematerialize(read.getResult(), chain);
    }
    // The originals and their casts are left without uses.
    SmallVector<Operation *> dead;
    for (bufferization::ToBufferOp read : reads) {
      SmallVector<Operation *> stack = {read};
      while (!stack.empty()) {
        Operation *op = stack.pop_back_val();
        dead.push_back(op);
        for (Operation *user : op->getUsers())
          if (isa<memref::CastOp>(user))
            stack.push_back(user);
      }
    }
    for (Operation *op : llvm::reverse(dead))
      if (op->use_empty())
        op->erase();
  }
};
} // namespace
