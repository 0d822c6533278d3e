//===- DeviceMemory.cpp - buffers only kernels use in device memory -------===//
//
// Of the host buffers mf-gpu-host-shared-memory made managed memory, those
// that no host code and no runtime call touches go to device memory: only
// buffers the host reads or writes, or hands to the runtime, stay
// host-visible.
//
//===----------------------------------------------------------------------===//

#include "meshfold/Dialect/GPU/Transforms/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

#define DEBUG_TYPE "mf-gpu-device-memory"

namespace meshfold {
#define GEN_PASS_DEF_MFGPUDEVICEMEMORYPASS
#include "meshfold/Dialect/GPU/Transforms/Passes.h.inc"
} // namespace meshfold

using namespace mlir;

namespace {
/// Whether every use of `buffer`, followed through views of it, is on the
/// device (a kernel operand, a device copy or fill), reads only its
/// descriptor, or frees it.
bool onlyDeviceUses(Value buffer) {
  SmallVector<Value> work{buffer};
  while (!work.empty()) {
    Value value = work.pop_back_val();
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (isa<gpu::LaunchFuncOp, gpu::DeallocOp, gpu::MemcpyOp, gpu::MemsetOp,
              memref::DimOp>(user))
        continue;
      if (auto meta = dyn_cast<memref::ExtractStridedMetadataOp>(user)) {
        work.push_back(meta.getBaseBuffer());
        continue;
      }
      if (auto view = dyn_cast<ViewLikeOpInterface>(user);
          view && view.getViewSource() == value) {
        for (Value result : user->getResults())
          if (isa<BaseMemRefType>(result.getType()))
            work.push_back(result);
        continue;
      }
      return false; // the host, a call, a return or a loop sees it
    }
  }
  return true;
}

/// Rewrites `alloc` into a device allocation on a stream: `gpu-to-llvm`
/// lowers a gpu.alloc without host_shared only in the async form with one
/// dependency. The stream is the rank's (the runtime's mgpuStreamCreate), so
/// nothing waits for the token: the allocation is ordered before the
/// kernels that use it. Its frees (gpu.dealloc async, waited for at once)
/// no longer wait: the runtime returns device memory to the pool in stream
/// order.
void toDeviceAlloc(gpu::AllocOp alloc) {
  OpBuilder b(alloc);
  Location loc = alloc.getLoc();
  Type token = gpu::AsyncTokenType::get(b.getContext());
  Value stream =
      gpu::WaitOp::create(b, loc, token, ValueRange()).getAsyncToken();
  auto device = gpu::AllocOp::create(
      b, loc, alloc.getType(), token, ValueRange{stream},
      alloc.getDynamicSizes(), alloc.getSymbolOperands(), /*hostShared=*/false);
  alloc.getMemref().replaceAllUsesWith(device.getMemref());
  alloc.erase();
  for (Operation *user : device.getMemref().getUsers()) {
    auto dealloc = dyn_cast<gpu::DeallocOp>(user);
    if (!dealloc || !dealloc.getAsyncToken())
      continue;
    for (Operation *waiter :
         llvm::make_early_inc_range(dealloc.getAsyncToken().getUsers()))
      if (auto wait = dyn_cast<gpu::WaitOp>(waiter);
          wait && !wait.getAsyncToken() &&
          wait.getAsyncDependencies().size() == 1)
        wait.erase();
  }
}

struct MFGPUDeviceMemoryPass
    : public meshfold::impl::MFGPUDeviceMemoryPassBase<MFGPUDeviceMemoryPass> {
  void runOnOperation() override {
    SmallVector<gpu::AllocOp> device;
    getOperation().walk([&](gpu::AllocOp alloc) {
      if (alloc.getHostShared() &&
          !alloc->getParentOfType<gpu::GPUModuleOp>() &&
          onlyDeviceUses(alloc.getMemref()))
        device.push_back(alloc);
    });
    for (gpu::AllocOp alloc : device)
      toDeviceAlloc(alloc);
  }
};
} // namespace
