//===- HostSharedMemory.cpp - host buffers as managed memory --------------===//
//
// The memory model of the CUDA target: every buffer the host program
// allocates is device-accessible (gpu.alloc host_shared, managed memory in
// the runtime), so kernels, collectives and host code share pointers.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/GPU/Transforms/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define DEBUG_TYPE "mf-gpu-host-shared-memory"

namespace meshfold {
#define GEN_PASS_DEF_MFGPUHOSTSHAREDMEMORYPASS
#include "meshfold/Dialect/GPU/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;

namespace {
/// gpu.dealloc of `memref`. gpu-to-llvm lowers only the async form (to
/// mgpuMemFree on a stream), so the free waits on a fresh stream and that
/// stream is synchronised and destroyed right after.
void createDealloc(OpBuilder &b, Location loc, Value memref) {
  Type token = gpu::AsyncTokenType::get(b.getContext());
  Value stream =
      gpu::WaitOp::create(b, loc, token, ValueRange()).getAsyncToken();
  Value freed =
      gpu::DeallocOp::create(b, loc, token, ValueRange{stream}, memref)
          .getAsyncToken();
  gpu::WaitOp::create(b, loc, Type(), ValueRange{freed});
}

/// gpu.alloc host_shared of the same type and sizes as `op`.
Value createSharedAlloc(OpBuilder &b, Location loc, MemRefType type,
                        ValueRange dynamicSizes, ValueRange symbols) {
  return gpu::AllocOp::create(b, loc, type, /*asyncToken=*/Type(),
                              /*asyncDependencies=*/ValueRange(), dynamicSizes,
                              symbols, /*hostShared=*/true)
      .getMemref();
}

struct MFGPUHostSharedMemoryPass
    : public meshfold::impl::MFGPUHostSharedMemoryPassBase<
          MFGPUHostSharedMemoryPass> {
  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (op->getParentOfType<gpu::GPUModuleOp>())
        return;
      if (isa<memref::AllocOp, memref::AllocaOp, memref::DeallocOp>(op))
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      OpBuilder b(op);
      Location loc = op->getLoc();
      if (auto alloc = dyn_cast<memref::AllocOp>(op)) {
        Value shared =
            createSharedAlloc(b, loc, alloc.getType(), alloc.getDynamicSizes(),
                              alloc.getSymbolOperands());
        alloc.replaceAllUsesWith(shared);
        alloc.erase();
      } else if (auto alloca = dyn_cast<memref::AllocaOp>(op)) {
        Value shared = createSharedAlloc(b, loc, alloca.getType(),
                                         alloca.getDynamicSizes(),
                                         alloca.getSymbolOperands());
        alloca.replaceAllUsesWith(shared);
        // Freed where the stack slot would have been: at the end of the
        // enclosing allocation scope.
        Operation *scope =
            alloca->getParentWithTrait<OpTrait::AutomaticAllocationScope>();
        Block *block = alloca->getBlock();
        while (block->getParentOp() != scope)
          block = block->getParentOp()->getBlock();
        if (!block->getTerminator()->hasTrait<OpTrait::ReturnLike>()) {
          alloca.emitError("cannot place the free of this alloca: its "
                           "allocation scope has more than one block");
          return signalPassFailure();
        }
        b.setInsertionPoint(block->getTerminator());
        createDealloc(b, loc, shared);
        alloca.erase();
      } else {
        auto dealloc = cast<memref::DeallocOp>(op);
        createDealloc(b, loc, dealloc.getMemref());
        dealloc.erase();
      }
    }
  }
};
} // namespace
