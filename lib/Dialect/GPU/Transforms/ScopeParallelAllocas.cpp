//===- ScopeParallelAllocas.cpp - keep block buffers per iteration --------===//
//
// An `scf.parallel` body is an automatic allocation scope: its
// `memref.alloca`s live for one iteration. The sequential lowering of the
// loop (`scf-to-cf`, as `--gpu-loops-on-cpu` runs the kernels' loop nests)
// drops that scope, so every iteration of a block loop would take new stack
// for the block's buffers and never give it back. This pass makes the scope
// explicit: a stack save at the start of the body and a restore at its end
// (what `memref.alloca_scope` lowers to; the scope op itself cannot hold
// the blocks `scf-to-cf` makes of the loops inside it).
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/GPU/Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "mf-gpu-scope-parallel-allocas"

namespace meshfold {
#define GEN_PASS_DEF_MFGPUSCOPEPARALLELALLOCASPASS
#include "meshfold/Dialect/GPU/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;

namespace {
struct MFGPUScopeParallelAllocasPass
    : public meshfold::impl::MFGPUScopeParallelAllocasPassBase<
          MFGPUScopeParallelAllocasPass> {
  void runOnOperation() override {
    SmallVector<scf::ParallelOp> loops;
    getOperation().walk([&](scf::ParallelOp op) {
      if (op.getNumResults() == 0 &&
          !op.getBody()->getOps<memref::AllocaOp>().empty())
        loops.push_back(op);
    });
    for (scf::ParallelOp op : loops) {
      Block *body = op.getBody();
      OpBuilder b(body, body->begin());
      auto ptr = LLVM::LLVMPointerType::get(b.getContext());
      Value saved = LLVM::StackSaveOp::create(b, op.getLoc(), ptr);
      b.setInsertionPoint(body->getTerminator());
      LLVM::StackRestoreOp::create(b, op.getLoc(), saved);
    }
  }
};
} // namespace
