//===- Passes.td - meshfold conversion passes --------------*- tablegen -*-===//

#ifndef MESHFOLD_CONVERSION_PASSES_TD
#define MESHFOLD_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertMoEToLinalgPass : Pass<"convert-moe-to-linalg"> {
  let summary = "lower moe compute ops to linalg, tensor and arith";
  let description = [{
    Rewrites every compute op of the `moe` dialect (embed, positions,
    rms_norm, linear, rope, attention, router, experts, lm_head) into
    `linalg.generic` ops on tensors, at whatever (local) shapes they carry.
    `moe.param` and `moe.kv_cache` are left for `convert-moe-to-runtime`.

    ```mlir
    %y = moe.linear %x, %w : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
    // becomes
    %e = tensor.empty(%t) : tensor<?x128xf32>
    %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<?x128xf32>) -> tensor<?x128xf32>
    %y = linalg.generic {... iterator_types = ["parallel", "parallel", "reduction"]}
           ins(%x, %w : ...) outs(%z : ...) { mulf, addf }
    ```
  }];
  let dependentDialects = [
    "::mlir::linalg::LinalgDialect", "::mlir::tensor::TensorDialect",
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect"
  ];
}

def ConvertMoEToRuntimePass : Pass<"convert-moe-to-runtime", "::mlir::ModuleOp"> {
  let summary = "bind weights, outputs and the entry point to the mfrt runtime";
  let description = [{
    - `moe.param` becomes `mf.weight` (the runtime's buffer of that weight,
      loaded from the safetensors file and checked against its name, dtype and
      shape) and a `bufferization.to_tensor ... restrict`;
    - `moe.kv_cache` becomes a call to
      `mfrt_kv_cache_f32(layer, k, v, pos, head_offset)`;
    - `moe.logits` becomes a call to `mfrt_logits_f32(logits, valid)`;
    - the entry function `@prefill` gets the C interface the runtime calls;
    - the module gets the manifest `__mf_manifest`: the model's dimensions and
      the weight table (id, name, storage dtype, shape) that the runtime
      checks the weights file against.

    ```mlir
    %w = moe.param "model.norm.weight" : tensor<64xf32>
    // becomes
    %m = mf.weight 3, "model.norm.weight" : memref<64xf32>
    %w = bufferization.to_tensor %m restrict : memref<64xf32> to tensor<64xf32>
    ```

    With `weight-dtype=bf16` every weight is stored (and loaded by the
    runtime) as bf16; its readers, lowered by `convert-moe-to-linalg`, widen
    each element to f32, so the program still accumulates in f32:

    ```mlir
    %m = mf.weight 3, "model.norm.weight" : memref<64xbf16>
    %w = bufferization.to_tensor %m restrict : memref<64xbf16> to tensor<64xbf16>
    ```
  }];
  let options = [
    Option<"entryName", "entry", "std::string", "\"prefill\"",
           "Name of the entry function">,
    Option<"weightDType", "weight-dtype", "std::string", "\"f32\"",
           "Storage type of the weights: f32 or bf16 (computation stays f32)">
  ];
  let dependentDialects = [
    "::mlir::func::FuncDialect", "::mlir::memref::MemRefDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::arith::ArithDialect", "::mlir::LLVM::LLVMDialect",
    "::meshfold::mf::MFDialect"
  ];
}

def ConvertMFToLLVMPass : Pass<"convert-mf-to-llvm", "::mlir::ModuleOp"> {
  let summary = "lower mf runtime-binding ops to LLVM calls into mfrt";
  let description = [{
    `mf.weight` becomes a call to `mfrt_weight(id)` returning the data pointer,
    wrapped in a memref descriptor of the op's static shape (as
    `memref.get_global` is lowered). Runs before `finalize-memref-to-llvm`.

    ```mlir
    %w = mf.weight 3, "model.norm.weight" : memref<64xf32>
    // becomes
    %id = llvm.mlir.constant(3 : i64) : i64
    %p = llvm.call @mfrt_weight(%id) : (i64) -> !llvm.ptr
    // + llvm.insertvalue ... building !llvm.struct<(ptr, ptr, i64, ...)>
    ```
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

def ConvertMFToRuntimePass : Pass<"convert-mf-to-runtime", "::mlir::ModuleOp"> {
  let summary = "lower mf mesh queries and collectives to calls into mfrt";
  let description = [{
    Every (mesh, axes) group the program uses gets an id, listed in the
    module attribute `mf.groups` (the manifest carries it; the runtime makes
    the groups from MeshLayout at start-up). Then:
    - `mf.coord` becomes `mfrt_cg_group_rank(id)`;
    - `mf.slice`, `mf.take` and `mf.zigzag_positions` become tensor/linalg
      code on this rank's coordinates (no communication);
    - each collective becomes one call on buffers (`mfrt_cg_all_gather_f32`,
      `..._reduce_scatter_f32`, `..._all_reduce_f32` (a grouped all-reduce
      packs its tensors into one buffer), `..._ring_step*`, `..._send_f32`,
      `..._recv_f32`, `..._gather_f32`, `..._dispatch_f32` +
      `..._dispatch_fetch` + `..._combine_f32`); results are new buffers
      (`memref.alloc`) seen as tensors.

    ```mlir
    %y = mf.all_gather %x on "attention" ["tp"] dim 0 : tensor<?x64xf32> -> tensor<?x64xf32>
    // becomes
    %b = memref.alloc(%rows) : memref<?x64xf32>
    call @mfrt_cg_all_gather_f32(%c0_i64, %x_buffer, %b_unranked) ...
    %y = bufferization.to_tensor %b restrict writable ...
    ```
  }];
  let dependentDialects = [
    "::mlir::func::FuncDialect", "::mlir::memref::MemRefDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::arith::ArithDialect", "::mlir::tensor::TensorDialect",
    "::mlir::linalg::LinalgDialect"
  ];
}


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
    waited for at once (`gpu-to-llvm` lowers only that form). `gpu-to-llvm` lowers them to
    `mgpuMemAlloc(bytes, stream, /*isHostShared=*/true)` and `mgpuMemFree`,
    which the runtime implements with managed memory, so kernels, the
    runtime's collectives and host code all see the same pointers.

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

#endif // MESHFOLD_CONVERSION_PASSES_TD
