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
  let options = [
    Option<"groupExperts", "group-experts", "bool", "true",
           "Sort the rows of moe.experts / moe.expert_ffn by expert and "
           "multiply each expert's weights against all of its rows at once "
           "(host loops over experts); false: every row gathers its expert's "
           "weights element by element (no loops, as GPU kernels need)">,
    Option<"fuseAttention", "fuse-attention", "bool", "true",
           "lower moe.attention and moe.attention_partial to a tiled one-pass "
           "online softmax (scf.forall over heads x query tiles, scf.for over "
           "key tiles) that never materialises the [T, T] scores; false keeps "
           "the materialised scores/probabilities as whole tensors">,
    Option<"attentionTile", "attention-tile", "int64_t", "64",
           "Query rows and keys per tile of the fused attention (the GPU "
           "target takes 32, so that a block's tiles fit its shared memory)">
  ];
  let dependentDialects = [
    "::mlir::linalg::LinalgDialect", "::mlir::tensor::TensorDialect",
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect", "::mlir::bufferization::BufferizationDialect"
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
    - `moe.kv_history` becomes the rank's K/V cache read in place: its
      rows (`mfrt_kv_rows_f32`, K and V) and a table of key tiles over them
      (`mfrt_kv_key_tiles` counts them, `mfrt_kv_key_tiles_fill` fills the
      tiles' first rows and row counts, `[n, 2]`, and their rows' positions,
      `[n, key-tile]`), which its attentions (`moe.attention`,
      `moe.attention_partial`) take as `tiles`; the step's own K/V are
      there already (its `moe.kv_cache` comes first);
    - `moe.logits` becomes a call to `mfrt_logits_f32(logits, valid)`;
    - the entry function `@prefill` gets the C interface the runtime calls,
      and so does the decode step `@decode` when the module has one (the
      manifest then names it; a module may have the step alone, which then
      also runs prefill, with no history);
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
    Option<"decodeName", "decode", "std::string", "\"decode\"",
           "Name of the decode step function, when the module has one">,
    Option<"weightDType", "weight-dtype", "std::string", "\"f32\"",
           "Storage type of the weights: f32 or bf16 (computation stays f32)">,
    Option<"historyTile", "history-tile", "int64_t", "1",
           "Batch invariance: a decode step's key tiles over a request's "
           "cached K/V also start at each multiple of this many of its rows "
           "(the manifest's history_tile; the attention's key tile), so that "
           "they do not depend on the rest of the batch; 1: tiles as long "
           "as the cache allows">,
    Option<"keyTile", "key-tile", "int64_t", "64",
           "Rows of a decode step's key tile at most (the attention's tile "
           "of convert-moe-to-linalg)">
  ];
  let dependentDialects = [
    "::mlir::func::FuncDialect", "::mlir::memref::MemRefDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::arith::ArithDialect", "::mlir::LLVM::LLVMDialect",
    "::mlir::tensor::TensorDialect", "::meshfold::mf::MFDialect"
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
    "::mlir::linalg::LinalgDialect", "::mlir::scf::SCFDialect"
  ];
}

#endif // MESHFOLD_CONVERSION_PASSES_TD
