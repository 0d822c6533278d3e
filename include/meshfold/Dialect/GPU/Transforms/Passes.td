//===- Passes.td - meshfold's GPU passes -------------------*- tablegen -*-===//
//
// The rewrites of the CUDA target that are not conversions: they tile loops,
// name locations and kernels, and move buffers to managed memory, on the
// upstream gpu, scf and memref ops around `convert-parallel-loops-to-gpu`
// and `gpu-kernel-outlining`.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_DIALECT_GPU_TRANSFORMS_PASSES_TD
#define MESHFOLD_DIALECT_GPU_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def MFGPUTileParallelLoopsPass
    : Pass<"mf-gpu-tile-parallel-loops", "::mlir::func::FuncOp"> {
  let summary = "tile outermost scf.parallel loops into blocks of GPU threads";
  let description = [{
    Tiles every outermost `scf.parallel` of a function (the parallel dims of
    a lowered `linalg.generic`; its reduction dims are `scf.for` loops
    inside and stay sequential in each thread, so no two threads ever
    accumulate into the same element) into a loop over blocks and a loop
    over the threads of a block. Threads go to the innermost dims first, up
    to `threads-per-block` in all and to the innermost three dims only (the
    ones `gpu-map-parallel-loops{mapping-policy=innermost-first}` maps to
    thread ids); a dim of static extent n gets at most the power of two at
    or above n. The inner loop has constant bounds and an in-bounds check
    (`tileParallelLoop` with `noMinMaxBounds`), as
    `convert-parallel-loops-to-gpu` needs. A loop with a dynamic bound is
    put under an `scf.if` that skips it when it has no iterations (a rank
    may hold no tokens, and a launch with a zero grid size is an error).

    A `memref.copy` becomes an element-wise `scf.parallel` copy first, so
    that it too runs on the device.

    A top-level `scf.for` nest that writes memory and holds no parallel
    loop (a lowered pure reduction, such as the search for the row of a
    position) is wrapped in a one-iteration `scf.parallel`, so that it too
    runs on the device (one thread) rather than on the host.

    ```mlir
    scf.parallel (%i, %j) = (%c0, %c0) to (%t, %c64) step (%c1, %c1) {...}
    // becomes
    scf.parallel (%bi, %bj) = (%c0, %c0) to (%t, %c64) step (%c4, %c64) {
      scf.parallel (%ti, %tj) = (%c0, %c0) to (%c4, %c64) step (%c1, %c1) {
        scf.if (in bounds) {...}
      }
    }
    ```
  }];
  let options = [
    Option<"threadsPerBlock", "threads-per-block", "int64_t", "256",
           "Threads per block (a power of two, at most 1024)">
  ];
  let dependentDialects = [
    "::mlir::scf::SCFDialect", "::mlir::arith::ArithDialect",
    "::mlir::affine::AffineDialect", "::mlir::memref::MemRefDialect"
  ];
}

def MFGPUHostSharedMemoryPass
    : Pass<"mf-gpu-host-shared-memory", "::mlir::ModuleOp"> {
  let summary = "make every host buffer device-accessible managed memory";
  let description = [{
    In the host functions (not in `gpu.module`s), rewrites `memref.alloc` and
    `memref.alloca` into `gpu.alloc host_shared` and `memref.dealloc` into
    `gpu.dealloc`; an `alloca` gets its `gpu.dealloc` at the end of its
    allocation scope. The free is the async form on a stream of its own,
    waited for at once (`gpu-to-llvm` lowers only that form). `gpu-to-llvm`
    lowers them to `mgpuMemAlloc(bytes, stream, /*isHostShared=*/true)` and
    `mgpuMemFree`, which the runtime implements with managed memory, so
    kernels, the runtime's collectives and host code all see the same
    pointers.

    ```mlir
    %b = memref.alloc(%t) {alignment = 64 : i64} : memref<?x64xf32>
    memref.dealloc %b : memref<?x64xf32>
    // becomes
    %b = gpu.alloc host_shared (%t) : memref<?x64xf32>
    %s = gpu.wait async
    %f = gpu.dealloc async [%s] %b : memref<?x64xf32>
    gpu.wait [%f]
    ```
  }];
  let dependentDialects = ["::mlir::gpu::GPUDialect"];
}

def MFGPUNameLocationsPass
    : Pass<"mf-gpu-name-locations", "::mlir::ModuleOp"> {
  let summary = "tag the location of every moe and mf op with the op's name";
  let description = [{
    Wraps the location of every op of the `moe` and `mf` dialects, and of
    every other op with a tensor result (such as the residual `arith.addf`),
    in a `NameLoc` holding the op's name, so that the linalg ops, loops and GPU
    kernels they lower to can be traced back to them
    (`mf-gpu-name-kernels` names kernels after it).

    ```mlir
    %y = moe.rms_norm %x, %w ... loc("model.mlir":7:10)
    // becomes
    %y = moe.rms_norm %x, %w ... loc("moe.rms_norm"("model.mlir":7:10))
    ```
  }];
}

def MFGPUNameKernelsPass : Pass<"mf-gpu-name-kernels", "::mlir::ModuleOp"> {
  let summary = "name each gpu.launch's kernel after the op it comes from";
  let description = [{
    Gives every `gpu.launch` of a host function a kernel name made of the
    op named by its location (`NameLoc`, see `mf-gpu-name-locations`),
    without the dialect prefix of `moe` ops (`arith.addf` gives
    `arith_addf`), and a counter, and one kernel
    module for them all, so that `gpu-kernel-outlining` puts every kernel
    into a single `gpu.module` (one binary, one PTX module).

    ```mlir
    gpu.launch blocks(...) threads(...) {...} loc("moe.rms_norm"(...))
    // becomes
    gpu.launch blocks(...) threads(...) module(@prefill_kernels)
        function(@rms_norm_3) {...}
    ```
  }];
  let options = [
    Option<"moduleName", "module", "std::string", "\"prefill_kernels\"",
           "Name of the gpu.module that receives the kernels">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect"];
}

#endif // MESHFOLD_DIALECT_GPU_TRANSFORMS_PASSES_TD
