// RUN: meshfold-import-hf %examples/seed/config.json --num-layers 1 -o %t.mlir
// RUN: meshfold-opt %t.mlir --mf-lower-to-cpu -o %t.ll.mlir
// RUN: FileCheck %s < %t.ll.mlir
// RUN: FileCheck %s --check-prefix=GONE < %t.ll.mlir

// The whole CPU pipeline on a one-layer model: only the LLVM dialect is left;
// weights come from the runtime, K/V (with their head offset) and the logits
// go to it, intermediates are freed, and the entry has the C interface the
// runtime's driver calls (tokens in, no result: outputs go by callbacks).
// CHECK-DAG: llvm.func @mfrt_weight(i64) -> !llvm.ptr
// CHECK-DAG: llvm.func @_mlir_ciface_mfrt_kv_cache_f32(i64, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64)
// CHECK-DAG: llvm.func @_mlir_ciface_mfrt_logits_f32(!llvm.ptr, i64)
// CHECK-DAG: llvm.func @free(!llvm.ptr)
// CHECK: llvm.func @prefill(
// CHECK: llvm.call @mfrt_weight
// CHECK: llvm.call @mfrt_kv_cache_f32
// CHECK: llvm.call @mfrt_logits_f32
// CHECK: llvm.call @free
// CHECK: llvm.func @_mlir_ciface_prefill(%{{[^:]+}}: !llvm.ptr) attributes
// CHECK: llvm.mlir.global external constant @__mf_manifest("meshfold-manifest 1\0Aentry prefill\0Ahidden 64\0Avocab 512\0Alayers 1\0Aheads 8\0Akv_heads 4\0Ahead_dim 8\0Aexperts 32\0Atop_k 2\0Affn 128\0A
// CHECK-SAME: param 0 model.embed_tokens.weight f32 2 512 64\0A
// CHECK-SAME: model.layers.0.block_sparse_moe.experts.{e}.w1.weight f32 3 32 128 64\0A

// GONE-NOT: = moe.
// GONE-NOT: {{^ *}}moe.kv_cache
// GONE-NOT: {{^ *}}moe.logits
// GONE-NOT: {{^ *}}moe.yield
// GONE-NOT: linalg.
// GONE-NOT: memref.
// GONE-NOT: bufferization.
// GONE-NOT: mf.weight
