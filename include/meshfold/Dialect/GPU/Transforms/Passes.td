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

    A top-level `scf.for` nest that writes memory, holds no parallel loop
    and whose results (if any) are unused (a lowered pure reduction, such
    as the search for the row of a position, or the experts' counting sort
    with its running sum) is wrapped in a one-iteration `scf.parallel`, so that it too
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

def MFGPUTileContractionsPass
    : Pass<"mf-gpu-tile-contractions", "::mlir::func::FuncOp"> {
  let summary = "tile contractions on buffers into blocks of threads that "
                "stage operands in block memory and accumulate register tiles";
  let description = [{
    Rewrites every top-level `linalg.generic` on buffers that is a
    contraction (`out += widen(a) * widen(b)` with one reduction dim, a
    projected-permutation map for the output and symbol-free affine maps
    for the inputs: the linear layers, the router, the LM head, the experts'
    products over their grouped rows, attention's `Q · Kᵀ` and `P · V` with
    GQA's `h floordiv g` for the KV head) into the loop nest of a
    shared-memory GEMM kernel, written as phases of a block's threads
    (`meshfold/Dialect/GPU/Transforms/Phases.h`):

    - the block loop (`scf.parallel {mf.gpu_phases = THREADS}`) runs over
      the other output dims (batch dims such as heads) and tiles of `ty * 4` rows by `tx * 4` columns
      of the output (`tx * ty = THREADS`, `tx >= ty`: 64 x 64 for 256
      threads);
    - per slab of 16 along the reduction, one phase stages the slab of each
      operand (widened to the output's type, zero outside the operand) in
      block buffers, consecutive threads reading consecutive elements of
      the operand's contiguous dim; the next phase has each thread multiply
      and add its 4 x 4 register tile (rows `ty + i * #ty`, columns
      `tx + j * #tx`, so a warp reads consecutive buffer elements);
    - the last phase adds each thread's tile, inside the output, to it.

    The accumulators are a buffer of one 4 x 4 tile per thread
    (`{mf.gpu_private}`), loaded once per slab and kept in registers over
    it. `mf-gpu-phases-to-launch` turns the nest into one kernel; run as
    loops on the CPU the phases compute the same sums in the same order.

    ```mlir
    linalg.generic {.. iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%x, %w : memref<?x64xf32>, memref<128x64xbf16>)
        outs(%y : memref<?x128xf32>) {..}
    // becomes
    scf.parallel (%m0, %n0) = (%c0, %c0) to (%t, %c128) step (%c64, %c64) {
      %sa = memref.alloca() : memref<16x64xf32>
      %sb = memref.alloca() : memref<16x64xf32>
      %acc = memref.alloca() {mf.gpu_private} : memref<256x4x4xf32>
      scf.parallel (%t) = (%c0) to (%c256) step (%c1) {..} {mf.gpu_thread_phase}
      scf.for %k0 = %c0 to %c64 step %c16 {
        scf.parallel (%t) ... { stage %x, %w slabs } {mf.gpu_thread_phase}
        scf.parallel (%t) ... { 4 x 4 tile += } {mf.gpu_thread_phase}
      }
      scf.parallel (%t) ... { %y += tile } {mf.gpu_thread_phase}
    } {mf.gpu_phases = 256 : i64}
    ```

    A contraction inside another loop nest (a lowering's own tile loops)
    is left as it is.
  }];
  let options = [
    Option<"threadsPerBlock", "threads-per-block", "int64_t", "256",
           "Threads per block (a power of two, at most 1024)">
  ];
  let dependentDialects = [
    "::mlir::scf::SCFDialect", "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect"
  ];
}

def MFGPUWgmmaContractionsPass
    : Pass<"mf-gpu-wgmma-contractions", "::mlir::func::FuncOp"> {
  let summary = "lower bf16-weight contractions to Hopper warpgroup MMA fed "
                "by TMA";
  let description = [{
    Rewrites every top-level `linalg.generic` on buffers that is the
    contraction `out[m, n] += a[m, k] * widen(w[n, k])` (a linear layer:
    `a` f32 or bf16 with any layout and a dynamic row count, `w` bf16 with
    static N a multiple of 8, static K a multiple of 16 and unit inner
    stride, `out` f32) into a kernel for sm_90a:

    - for a non-empty `a` (TMA refuses a dimension of 0), `a` is rounded to
      bf16 into a contiguous buffer of device memory (a `linalg.generic` the
      other GPU passes make a kernel of), so both operands are bf16 and
      K-major; the accumulation stays f32;
    - the host makes a TMA descriptor of each operand
      (`nvgpu.tma.create.descriptor`): boxes of 128 (`a`) or BN (`w`) rows
      x BK elements, BN the widest of 128, 64, 32, 16 and 8 that divides N,
      BK the widest of 64, 32 and 16 that divides K, each row of BK bf16
      swizzled over its 128, 64 or 32 bytes, rows past the end read as
      zeros;
    - one block of one warpgroup (128 threads) per 128 x BN tile of `out`,
      launched with dynamic shared memory: 3 stages of an `a` and a `w`
      tile at multiples of 1024 bytes, at least 64 bytes past the dynamic
      memory's symbol (ptxas may put the static mbarriers right after it),
      each filled by TMA
      (`nvgpu.tma.async.load`, issued by thread 0) under an mbarrier that
      counts the bytes (`nvgpu.mbarrier.arrive.expect_tx`; the mbarriers'
      initialization fenced for the asynchronous proxy);
    - per BK-wide step of K the warpgroup waits for the stage's mbarrier
      (parity of the step's round), issues 2 x BK / 16
      `nvvm.wgmma.mma_async` m64nBNk16 bf16 x bf16 -> f32 on shared-memory
      descriptors (meshfold/Dialect/GPU/Transforms/WgmmaLayout.h: K-major,
      swizzled rows, 8-row atoms; the k16 steps advance the start address
      by 32 bytes), commits and waits for the group, and thread 0 refills
      the stage with the step three ahead;
    - the accumulators (two m64nBN fragments, BN / 2 f32 registers each)
      are added to `out` where the row is inside it, each register at the
      element the ISA's fragment layout gives it.

    Other contractions are left to `mf-gpu-tile-contractions`.
  }];
  let dependentDialects = [
    "::mlir::scf::SCFDialect", "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect", "::mlir::gpu::GPUDialect",
    "::mlir::nvgpu::NVGPUDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::linalg::LinalgDialect"
  ];
}

def MFGPULibraryContractionsPass
    : Pass<"mf-gpu-library-contractions", "::mlir::ModuleOp"> {
  let summary = "hand the linear layers with bf16 weights to cuBLASLt";
  let description = [{
    `--gemm-backend cublaslt`: every top-level linear layer
    `out[m, n] += a[m, k] * widen(w[n, k])` on buffers with bf16 weights
    (any static N and K; see BF16Linear.h) becomes a call of the runtime's
    `mfrt_cg_gemm_bf16(w, a16, out)` (libmfrt_cublaslt.a: one
    `cublasLtMatmul` on the rank's stream, bf16 operands, f32 accumulation
    added to `out`), after `a` is rounded into a contiguous bf16 copy (a
    `linalg.generic` the other GPU passes make a kernel of). The same
    program as `--gemm-backend generated` with the library's products: the
    peer every GPU timing is set beside, and a fallback users can pick.

    ```mlir
    linalg.generic {..} ins(%x, %w : memref<?x64xf32>, memref<128x64xbf16>)
                        outs(%y : memref<?x128xf32>) {..}
    // becomes
    %x16, %t1 = gpu.alloc async [%s] (%t) : memref<?x64xbf16>
    linalg.generic {..} ins(%x : memref<?x64xf32>) outs(%x16 : ..) {truncf}
    func.call @mfrt_cg_gemm_bf16(%w_, %x16_, %y_)
        : (memref<*xbf16>, memref<*xbf16>, memref<*xf32>) -> ()
    gpu.dealloc async [%s2] %x16
    ```
  }];
  let dependentDialects = [
    "::mlir::func::FuncDialect", "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect", "::mlir::linalg::LinalgDialect",
    "::mlir::gpu::GPUDialect"
  ];
}

def MFGPUForallToPhasesPass
    : Pass<"mf-gpu-forall-to-phases", "::mlir::func::FuncOp"> {
  let summary = "turn a top-level scf.forall over tiles into a block loop "
                "of thread phases";
  let description = [{
    A bufferized `scf.forall` whose body works on tiles (the fused
    attention: per head and query tile, an online softmax over key tiles
    with running max, sum and output) becomes a block loop of thread phases
    (`meshfold/Dialect/GPU/Transforms/Phases.h`), so that
    `mf-gpu-phases-to-launch` makes it one kernel with a block per
    iteration:

    - every `memref.alloc` of the body (at any depth) becomes a buffer of
      the block, sized for the largest tile (each dynamic size must have a
      constant bound, such as `min(64, rest)`), viewed at its actual size
      with `memref.reinterpret_cast`; the body's deallocations go;
    - every linalg op and `memref.copy` becomes a thread phase: the
      threads share its parallel points (thread t takes points t,
      t + THREADS, ...), each running the reduction dims of its point in
      sequence, so no two threads write one element;
    - loops (`scf.for`, with or without results), branches (`scf.if`) and
      side-effect-free ops stay block code; a scalar read back from a tile
      buffer (`memref.load`) is read by every thread.

    ```mlir
    scf.forall (%h, %i0) = (0, 0) to (8, %t) step (1, 64) {
      %n = arith.minsi %rest, %c64 : index
      %s = memref.alloc(%n) : memref<?x64xf32>
      linalg.fill ins(%zero : f32) outs(%s : memref<?x64xf32>)
      ...
    }
    // becomes
    scf.parallel (%h, %i0) = (%c0, %c0) to (%c8, %t) step (%c1, %c64) {
      %buf = memref.alloca() : memref<4096xf32>
      %n = arith.minsi %rest, %c64 : index
      %s = memref.reinterpret_cast %buf to offset: [0], sizes: [%n, 64],
          strides: [64, 1] : memref<4096xf32> to memref<?x64xf32>
      scf.parallel (%t) = (%c0) to (%c256) step (%c1) {
        scf.for %p = %t to %points step %c256 { .. store %zero .. }
      } {mf.gpu_thread_phase}
      ...
    } {mf.gpu_phases = 256 : i64}
    ```
  }];
  let options = [
    Option<"threadsPerBlock", "threads-per-block", "int64_t", "256",
           "Threads per block (a power of two, at most 1024)">
  ];
  let dependentDialects = [
    "::mlir::scf::SCFDialect", "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect", "::mlir::linalg::LinalgDialect"
  ];
}

def MFGPUPhasesToLaunchPass
    : Pass<"mf-gpu-phases-to-launch", "::mlir::func::FuncOp"> {
  let summary = "turn block loops of thread phases into gpu.launch kernels "
                "with workgroup memory and barriers";
  let description = [{
    Each `scf.parallel {mf.gpu_phases = THREADS}` (the form of
    `meshfold/Dialect/GPU/Transforms/Phases.h`, written by
    `mf-gpu-tile-contractions`) becomes one `gpu.launch` of THREADS threads
    per block and one block per iteration of the block loop (a linear block
    id, delinearized into the loop's ivs), under an `scf.if` that skips an
    empty grid:

    - the `memref.alloca`s of its body become workgroup memory
      attributions, those marked `{mf.gpu_private}` private ones
      without their first (thread) dim;
    - each thread phase (`scf.parallel {mf.gpu_thread_phase}`) becomes the
      code of thread `thread_id x`, followed by `gpu.barrier`; `scf.for`
      loops around phases and side-effect-free ops (bounds, indices) are
      run by every thread alike.

    A private buffer indexed by anything but its thread, a side effect
    outside a phase, or a block loop nested in another parallel loop is an
    error.

    ```mlir
    scf.parallel (%i) = (%c0) to (%n) step (%c64) {
      %s = memref.alloca() : memref<16x64xf32>
      %acc = memref.alloca() {mf.gpu_private} : memref<256x4xf32>
      scf.parallel (%t) = (%c0) to (%c256) step (%c1) {..} {mf.gpu_thread_phase}
    } {mf.gpu_phases = 256 : i64}
    // becomes
    scf.if %nonempty {
      gpu.launch blocks(%bx, ..) in (.. = %blocks, ..) threads(%tx, ..) in
          (.. = %c256, ..)
          workgroup(%s : memref<16x64xf32, #gpu.address_space<workgroup>>)
          private(%acc : memref<4xf32, #gpu.address_space<private>>) {
        .. gpu.barrier
        gpu.terminator
      }
    }
    ```
  }];
  let dependentDialects = [
    "::mlir::gpu::GPUDialect", "::mlir::scf::SCFDialect",
    "::mlir::arith::ArithDialect", "::mlir::memref::MemRefDialect"
  ];
}

def MFGPUScopeParallelAllocasPass
    : Pass<"mf-gpu-scope-parallel-allocas", "::mlir::func::FuncOp"> {
  let summary = "free the allocas of each scf.parallel iteration when the "
                "loop is lowered sequentially";
  let description = [{
    The body of an `scf.parallel` is an automatic allocation scope: its
    `memref.alloca`s (a block's shared buffers in the kernels' loop nests of
    `mf-gpu-tile-contractions`) live for one iteration. Lowered sequentially
    (`scf-to-cf`, which is how `--gpu-loops-on-cpu` runs those nests on the
    CPU) the loop loses that scope and each iteration would take new stack
    without returning it. This pass saves the stack pointer at the start of
    the body of every result-free `scf.parallel` that holds an alloca and
    restores it at the end: what `memref.alloca_scope` lowers to (the scope
    op itself cannot hold the blocks `scf-to-cf` makes of the loops inside
    it, and canonicalization inlines it into the loop again).

    ```mlir
    scf.parallel (%b) = ... {
      %s = memref.alloca() : memref<16x64xf32>
      ...
    }
    // becomes
    scf.parallel (%b) = ... {
      %sp = llvm.intr.stacksave : !llvm.ptr
      %s = memref.alloca() : memref<16x64xf32>
      ...
      llvm.intr.stackrestore %sp : !llvm.ptr
    }
    ```
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
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

def MFGPUDeviceMemoryPass
    : Pass<"mf-gpu-device-memory", "::mlir::ModuleOp"> {
  let summary = "keep in device memory the buffers only kernels use";
  let description = [{
    Runs after `mf-gpu-host-shared-memory`. A host buffer
    (`gpu.alloc host_shared`) that only kernels touch becomes device memory
    (`gpu.alloc`, no `host_shared`): its every use, through views
    (`memref.subview`, `cast`, `expand_shape`, `collapse_shape`, ...), is a
    kernel operand of `gpu.launch_func`, a `gpu.memcpy` or `gpu.memset`, a
    `memref.dim` or its `gpu.dealloc`. A buffer the host code reads or
    writes (`memref.load`, `memref.store`, a copy on the host) or that goes
    to a call (the runtime's collectives, the KV cache and logits hooks),
    a return or a loop stays host-shared, so that the host and the runtime
    see it.

    `gpu-to-llvm` lowers a device allocation only in the async form with one
    dependency: it becomes `gpu.alloc async` on a fresh stream (the rank's
    stream in the runtime), and lowers to
    `mgpuMemAlloc(bytes, stream, /*isHostShared=*/false)`, which the runtime
    serves from the device's stream-ordered memory pool. Its frees drop the
    host wait after them: the runtime returns the memory to the pool in
    stream order.

    ```mlir
    %a = gpu.alloc host_shared (%t) : memref<?x64xf32>
    %b = gpu.alloc host_shared () : memref<4xi64>
    gpu.launch_func @k::@k ... args(%a : memref<?x64xf32>, %b : memref<4xi64>)
    %n = memref.load %b[%c0] : memref<4xi64>
    %s = gpu.wait async
    %f = gpu.dealloc async [%s] %a : memref<?x64xf32>
    gpu.wait [%f]
    // becomes
    %s0 = gpu.wait async
    %a, %t0 = gpu.alloc async [%s0] (%t) : memref<?x64xf32>
    %b = gpu.alloc host_shared () : memref<4xi64>
    ...
    %s = gpu.wait async
    %f = gpu.dealloc async [%s] %a : memref<?x64xf32>
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
