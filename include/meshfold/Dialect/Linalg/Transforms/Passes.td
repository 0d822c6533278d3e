//===- Passes.td - meshfold's linalg passes ----------------*- tablegen -*-===//
//
// Code generation of the CPU target on upstream linalg, scf and vector ops:
// the contractions of the model become cache-blocked, register-tiled vector
// loops; everything else is left to `convert-linalg-to-loops`.
//
//===----------------------------------------------------------------------===//

#ifndef MESHFOLD_DIALECT_LINALG_TRANSFORMS_PASSES_TD
#define MESHFOLD_DIALECT_LINALG_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def MFLinalgContractionKernelsPass
    : Pass<"mf-linalg-contraction-kernels", "::mlir::func::FuncOp"> {
  let summary = "lower multiply-accumulate linalg.generic ops on buffers to "
                "cache-blocked, register-tiled vector FMA loops";
  let description = [{
    Rewrites every `linalg.generic` on buffers that is a contraction in the
    form the moe lowering emits, `out[.., m, n] += a[.., m, k] * b[.., n, k]`
    or `a[.., m, k] * b[.., k, n]` (one reduction dim, projected-permutation
    maps, a body of one `arith.mulf` of the two inputs, each possibly
    widened by `arith.extf`, added to the output), into loops of 1-D vector
    ops that keep a tile of the output in registers:

    - *packed outer-product* tiles, when both operands are contiguous
      along `k` (a linear layer `x · Wᵀ`, an expert's rows times its
      weights), the output runs along `n` and there are at least 16 rows
      (an `scf.if` on the row count): each block of 256 columns x 256 of
      `k` of `b` is copied (widened, transposed in squares of vectors by
      `vector.transpose`) into a heap buffer of panels one register tile
      wide, which `mr` rows of `nv` vectors then read in order; rows come in
      chunks of about 256 (a multiple of `mr`; the last tile of a chunk is
      clamped and its extra rows not stored), and the parallel loop runs
      over (row chunk, column block) pairs;
    - *dot* tiles, when both operands are contiguous along `k` otherwise
      (fewer rows, the LM head's single row): `mr x nr` vector accumulators
      run along `k` and are reduced once at the end of each `k` block;
    - *outer-product* tiles, when `b` and the output are contiguous along
      `n` (attention's `Q · Kᵀ` with `Kᵀ` laid out `[d, keys]`, and `P · V`):
      `mr` rows of `nv` vectors, one broadcast of `a[m, k]` and `nv` FMAs
      per row and `k`.

    The output is swept in blocks of `n` (so that a block of `b` stays in
    the L2 cache while every row tile of `a` passes over it) and `k` is cut
    into blocks; tiles at the edges use smaller register tiles and a scalar
    loop over the last `k % vector-width` elements, so any shape, static or
    dynamic, is handled. The loop over `n` blocks is an `scf.parallel`
    (threads, through `convert-scf-to-openmp`) unless the contraction is
    already inside a parallel loop. Summation order differs from the
    sequential loop nest: the result is equal up to float rounding.

    A dot contraction with enough rows (16) runs as outer products over a
    packed copy of `b`, fewer as dot tiles: the two sum in different
    orders, so a row's result depends on how many rows come with it. With
    `batch-invariant` such contractions always take the packed path: each
    output's summation order then depends on the reduction length only,
    and a row gives the same bits whether it comes alone or with others.

    With `bf16-dot` (AVX-512 with AVX512_BF16), a contraction of a bf16
    operand (a weight) with an f32 one (an activation) rounds the f32
    operand to bf16 once, into a copy the kernel reads instead, and
    multiplies pairs of `k` with
    `x86vector.avx512.dot` (`vdpbf16ps`: 32 products per instruction,
    accumulated in f32) instead of widening the weight to f32: dot tiles
    step along `k` by 32; packed panels hold pairs of `k` of a column
    (the weight's rows read as 32-bit pairs and transposed), and outer
    products broadcast a row's pair. Whole `k` blocks of 32 take the
    pairs; the edges keep scalar loops over the copy. Where a
    contraction has no such operands it is unchanged.

    A generic that is not such a contraction, or whose innermost operand
    dims are not of unit stride, is left unchanged.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::LLVM::LLVMDialect",
    "::mlir::math::MathDialect", "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect", "::mlir::vector::VectorDialect",
    "::mlir::x86vector::X86VectorDialect"
  ];
  let options = [
    Option<"vectorBits", "vector-bits", "int64_t", /*default=*/"256",
           "Width of the target's vector registers in bits (128: SSE, "
           "256: AVX2, 512: AVX-512)">,
    Option<"parallel", "parallel", "bool", /*default=*/"true",
           "Emit the loop over output blocks as scf.parallel">,
    Option<"batchInvariant", "batch-invariant", "bool", /*default=*/"false",
           "One summation order for every row count: packable dot "
           "contractions always run packed">,
    Option<"bf16Dot", "bf16-dot", "bool", /*default=*/"false",
           "With vector-bits=512, a contraction of a bf16 operand with an "
           "f32 one rounds the f32 operand to bf16 and multiplies pairs "
           "along k with AVX512_BF16's dot (x86vector.avx512.dot), "
           "accumulating f32">,
  ];
}

def MFLinalgParallelRowsPass
    : Pass<"mf-linalg-parallel-rows", "::mlir::func::FuncOp"> {
  let summary = "split the outermost dim of linalg ops on buffers into an "
                "scf.parallel over blocks of rows";
  let description = [{
    What is left of the model's linalg ops after the contraction kernels is
    elementwise work and data movement (the experts' gathers, SiLU and
    combine, fills, norms, the rope); `convert-linalg-to-loops` alone makes
    each a sequential loop nest that one thread runs. This pass tiles dim 0
    of every linalg op on buffers into `blocks` blocks of
    `ceil(size / blocks)` rows, as an `scf.parallel` (threads, through
    `convert-scf-to-openmp`), leaving the tiled op on subviews for
    `convert-linalg-to-loops`; the inner dims stay whole, so LLVM still
    vectorizes the innermost loop.

    An op is split only when dim 0 is a parallel iterator that indexes every
    output (blocks then write disjoint elements), its body writes no memory,
    and it is not already inside an `scf.parallel` or `scf.forall` (a tile
    of attention runs on one thread).

    With `min-elements`, the split op runs only when the op's iteration
    count (its loops' sizes multiplied, at run time) is at least that; an
    `scf.if` keeps the op whole for fewer, on the calling thread, since
    starting the threads costs more than such an op (a decode step's row).

    ```mlir
    linalg.generic ... outs(%y : memref<?x2816xf32>) { silu }
    // becomes
    scf.parallel (%i) = (%c0) to (%rows) step (%block) {
      linalg.generic ... outs(%y_block : memref<?x2816xf32, strided<...>>)
    }
    ```
  }];
  let dependentDialects = [
    "::mlir::affine::AffineDialect", "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect"
  ];
  let options = [
    Option<"blocks", "blocks", "int64_t", /*default=*/"64",
           "Number of blocks dim 0 is cut into (at least 1)">,
    Option<"minElements", "min-elements", "int64_t", /*default=*/"0",
           "With more than 1: an op of fewer iterations (all its loops' "
           "sizes multiplied) at run time stays on the calling thread">,
  ];
}

def MFStridedCopiesToLinalgPass
    : Pass<"mf-strided-copies-to-linalg", "::mlir::func::FuncOp"> {
  let summary = "rewrite memref.copy between strided buffers as linalg.copy";
  let description = [{
    Bufferization copies a tensor into a slice of another (a
    `tensor.concat`, a value inserted into a strided view) with
    `memref.copy`. Between contiguous buffers that lowers to a `memcpy`; with
    a strided layout on either side it lowers to a call of the MLIR runner
    library's `memrefCopy`, which emitted programs do not link. This pass
    turns those copies into `linalg.copy`, which the CPU pipeline splits
    over the threads and lowers to loops like any other linalg op.
    Copies between identity layouts are left alone.

    ```mlir
    memref.copy %a, %b : memref<?x8x32xf32> to memref<?x8x32xf32, strided<[320, 40, 1]>>
    // becomes
    linalg.copy ins(%a : ...) outs(%b : ...)
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def MFMathPolynomialExpPass
    : Pass<"mf-math-polynomial-exp", "::mlir::func::FuncOp"> {
  let summary = "rewrite f32 math.exp as a polynomial approximation in "
                "arithmetic that vectorizes";
  let description = [{
    `math.exp` becomes a call of libm's `expf` per element, which the loop
    vectorizer cannot widen: the softmax of attention's tiles and the
    experts' SiLU would run one scalar call at a time. This pass applies
    upstream's polynomial approximation of `exp` (range reduction by ln 2, a
    minimax polynomial, the power of two built in the exponent bits) to f32
    `math.exp` ops, scalar or vector, so that the loops around them
    vectorize. Within f32's range it is a few ulp from `expf`; below -87.8
    (and at -inf, a masked score) it gives 0, above 88.8 (and at +inf) the
    value at 88.8, about 3.7e38, rather than inf; NaN stays NaN. Other math
    functions are left to libm.

    ```mlir
    %e = math.exp %x : f32
    // becomes arith ops (fma, floor, shifts, bitcast, select), no call
    ```
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
    "::mlir::vector::VectorDialect"
  ];
}

def MFBufferReadsAtUsePass
    : Pass<"mf-buffer-reads-at-use", "::mlir::func::FuncOp"> {
  let summary = "one bufferization.to_buffer per use, right before it";
  let description = [{
    The runtime calls of emitted programs (outputs, collectives) read their
    tensor operands through `bufferization.to_buffer` (and `memref.cast`s of
    its result). The op is pure: CSE merges the reads of one tensor into
    the first, and One-Shot Bufferize then sees the tensor read only there
    -- a later call may get a buffer that an op in between reused in place
    (a decode step's positions, read again by its logits output, were
    overwritten by the router's expert ids). This pass puts a copy of the
    read (`to_buffer` and its casts) right before each op that uses it, so
    that the tensor is read where the buffer is. Run it after the last CSE
    and before bufferization.

    ```mlir
    %b = bufferization.to_buffer %pos read_only : ...
    call @first(%b) ...
    ... ops that may reuse %pos's buffer in place ...
    call @last(%b) ...
    // becomes
    %b0 = bufferization.to_buffer %pos read_only : ...
    call @first(%b0) ...
    %b1 = bufferization.to_buffer %pos read_only : ...
    call @last(%b1) ...
    ```
  }];
  let dependentDialects = [
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::memref::MemRefDialect"
  ];
}

def MFFillsAtUsePass
    : Pass<"mf-fills-at-use", "::mlir::func::FuncOp"> {
  let summary = "one linalg.fill per destination it initialises, right "
                "before the op that writes it";
  let description = [{
    Every contraction and reduction starts from a `linalg.fill` of zeros
    (or of the reduction's identity) into a `tensor.empty`. CSE merges the
    fills of equal shape and value into one, used by every layer's ops of
    that shape. One-Shot Bufferize then keeps that one filled buffer alive
    from its first use to its last (the whole function) and copies it into
    a new buffer for each op that writes it: a prefill of T rows held an
    extra T x hidden and T x kv-width buffer through all its layers and
    copied them once per projection. This pass gives each op that writes
    the fill's result (as a destination-style init, or as the initial value
    of a loop's carried tensor) its own `tensor.empty` and `linalg.fill`,
    right before it; reads keep the original. Bufferization then fills
    each op's own buffer in place. Run it after the last CSE and before
    bufferization.

    ```mlir
    %e = tensor.empty(%t) : tensor<?x512xf32>
    %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<?x512xf32>) -> tensor<?x512xf32>
    %k = linalg.matmul ins(%h, %wk : ...) outs(%z : tensor<?x512xf32>) -> ...
    %v = linalg.matmul ins(%h, %wv : ...) outs(%z : tensor<?x512xf32>) -> ...
    // becomes
    %e0 = tensor.empty(%t) : tensor<?x512xf32>
    %z0 = linalg.fill ins(%c0 : f32) outs(%e0 : tensor<?x512xf32>) -> tensor<?x512xf32>
    %k = linalg.matmul ins(%h, %wk : ...) outs(%z0 : tensor<?x512xf32>) -> ...
    %e1 = tensor.empty(%t) : tensor<?x512xf32>
    %z1 = linalg.fill ins(%c0 : f32) outs(%e1 : tensor<?x512xf32>) -> tensor<?x512xf32>
    %v = linalg.matmul ins(%h, %wv : ...) outs(%z1 : tensor<?x512xf32>) -> ...
    ```
  }];
  let dependentDialects = [
    "::mlir::linalg::LinalgDialect", "::mlir::tensor::TensorDialect"
  ];
}

def MFSinkAllocsPass : Pass<"mf-sink-allocs", "::mlir::func::FuncOp"> {
  let summary = "move each memref.alloc down to right before its first use";
  let description = [{
    One-Shot Bufferize allocates a buffer where its `tensor.empty` stood,
    and canonicalization and CSE gather those early in the function: an
    attention's output buffer was allocated before the rotary embedding of
    its queries, and lived beside the queries it never overlapped. With the
    deallocations right after the last uses
    (`--optimize-allocation-liveness`), this pass moves each `memref.alloc`
    down its block to right before the first op that uses the buffer (or
    holds a use in its regions), so that a buffer is live only from its
    first write to its last read. The sizes it takes are defined above it
    already; the buffers' contents and the program's results are unchanged.

    ```mlir
    %out = memref.alloc(%t) : memref<?x16x64xf32>
    %q = memref.alloc(%t) : memref<?x16x64xf32>
    linalg.generic ... outs(%q ...)          // rotary embedding
    memref.dealloc %qkv ...
    scf.forall ... %out ...                  // attention
    // becomes
    %q = memref.alloc(%t) : memref<?x16x64xf32>
    linalg.generic ... outs(%q ...)
    memref.dealloc %qkv ...
    %out = memref.alloc(%t) : memref<?x16x64xf32>
    scf.forall ... %out ...
    ```
  }];
}

def MFOutlineParallelLoopsPass
    : Pass<"mf-outline-parallel-loops", "::mlir::ModuleOp"> {
  let summary = "outline each outermost scf.parallel into a private function, "
                "one function per distinct loop nest";
  let description = [{
    The lowering emits every layer's kernels in place, so a pipeline stage
    of n layers of one shape holds n copies of each parallel loop nest, and
    everything after (the OpenMP and LLVM conversions, LLVM's optimisation
    and code generation) does the same work n times. This pass moves each
    outermost `scf.parallel` of a function into a private `func.func` of its
    own, called in its place: the values it uses from above become the
    function's arguments, except constants, which are cloned into it (loop
    bounds and tile sizes stay constant for the vectorizer). A loop nest
    structurally equal to one already outlined (same ops, attributes and
    argument types) calls that function instead, so each distinct kernel is
    compiled once. Results (reductions) are returned.

    ```mlir
    func.func @stage(%a: memref<?x64xf32>, %b: memref<?x64xf32>, %n: index) {
      scf.parallel (%i) = (%c0) to (%n) step (%c1) { ... %a ... }
      scf.parallel (%i) = (%c0) to (%n) step (%c1) { ... %b ... }
    }
    // becomes, when the two nests are the same but for their buffers
    func.func @stage(%a: memref<?x64xf32>, %b: memref<?x64xf32>, %n: index) {
      call @stage_par0(%n, %a) : (index, memref<?x64xf32>) -> ()
      call @stage_par0(%n, %b) : (index, memref<?x64xf32>) -> ()
    }
    func.func private @stage_par0(%n: index, %a: memref<?x64xf32>) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      scf.parallel (%i) = (%c0) to (%n) step (%c1) { ... %a ... }
      return
    }
    ```
  }];
  let dependentDialects = [
    "::mlir::func::FuncDialect", "::mlir::LLVM::LLVMDialect"
  ];
}

#endif // MESHFOLD_DIALECT_LINALG_TRANSFORMS_PASSES_TD
