// RUN: meshfold-opt %s -split-input-file --convert-moe-to-runtime -verify-diagnostics | FileCheck %s
// RUN: meshfold-opt %s -split-input-file --convert-moe-to-runtime="history-tile=64" -verify-diagnostics | FileCheck %s --check-prefix=TILE
// RUN: not meshfold-opt %s -split-input-file --convert-moe-to-runtime="history-tile=0" 2>&1 | FileCheck %s --check-prefix=BADTILE

// With history-tile (a batch-invariant program's attention key tile) the
// manifest tells the runtime to start each request's cached rows of a
// step's history at a multiple of it; without, it says nothing (packed).
// TILE: llvm.mlir.global external constant @__mf_manifest
// TILE-SAME: \0Ahistory_tile 64\0A
// CHECK-NOT: history_tile
// BADTILE: error: history-tile must be at least 1, got 0

// A decode step: moe.kv_history becomes buffers of (cached + step) rows that
// mfrt_kv_history_f32 fills from the runtime's cache and the step's own
// rows; @decode gets the C interface beside @prefill, and the manifest names
// it and the model's eos ids.
// CHECK-DAG: func.func private @mfrt_kv_history_length(i64, memref<?xi64, strided<[?], offset: ?>>) -> i64 attributes {llvm.emit_c_interface}
// CHECK-DAG: func.func private @mfrt_kv_history_f32(i64, memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>, memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>, memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>, memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>, i64) attributes {llvm.emit_c_interface}
// CHECK: func.func @prefill({{.*}}) attributes {llvm.emit_c_interface}
// CHECK: func.func @decode({{.*}}) attributes {llvm.emit_c_interface}
// CHECK: %[[L:.*]] = arith.constant 3 : i64
// CHECK: %[[STEP:.*]] = tensor.dim %arg2, %c0
// CHECK: %[[SP:.*]] = memref.cast %{{.*}} : memref<?xi64, strided<[?], offset: ?>> to memref<?xi64, strided<[?], offset: ?>>
// CHECK: %[[N:.*]] = call @mfrt_kv_history_length(%[[L]], %[[SP]])
// CHECK: %[[CACHED:.*]] = arith.index_cast %[[N]] : i64 to index
// CHECK: %[[ROWS:.*]] = arith.addi %[[CACHED]], %[[STEP]]
// CHECK: %[[K:.*]] = memref.alloc(%[[ROWS]]) : memref<?x1x4xf32>
// CHECK: %[[V:.*]] = memref.alloc(%[[ROWS]]) : memref<?x1x4xf32>
// CHECK: %[[P:.*]] = memref.alloc(%[[ROWS]]) : memref<?xi64>
// All KV heads: the first is 0.
// CHECK: %[[H0:.*]] = arith.constant 0 : i64
// CHECK: call @mfrt_kv_history_f32(%[[L]], %{{.*}}, %{{.*}}, %[[SP]], %{{.*}}, %{{.*}}, %{{.*}}, %[[H0]])
// CHECK: bufferization.to_tensor %[[K]] restrict : memref<?x1x4xf32> to tensor<?x1x4xf32>
// A partitioned step's history holds the rank's KV heads: the first is
// passed on.
// CHECK: %[[OFF:.*]] = arith.index_cast %arg4 : index to i64
// CHECK: call @mfrt_kv_history_f32(%{{.*}}, %[[OFF]])
// CHECK-NOT: moe.kv_history
// CHECK: llvm.mlir.global external constant @__mf_manifest
// CHECK-SAME: decode decode\0Aeos 2 5\0A
module attributes {moe.eos_token_ids = array<i64: 2, 5>} {
  func.func @prefill(%tokens: tensor<?xi64>) {
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %h = moe.embed %e, %tokens : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    return
  }
  func.func @decode(%tokens: tensor<?xi64>, %pos: tensor<?xi64>, %k: tensor<?x1x4xf32>, %v: tensor<?x1x4xf32>, %first: index) -> (tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>, tensor<?x1x4xf32>) {
    %hk, %hv, %hp = moe.kv_history %k, %v, %pos {layer = 3 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64> -> tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
    %lk, %lv, %lp = moe.kv_history %k, %v, %pos heads from %first {layer = 3 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64> -> tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
    return %hk, %hv, %hp, %lk : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>, tensor<?x1x4xf32>
  }
}

// -----

// A step's row logits: one call of mfrt_step_logits_f32 with the rows, their
// positions and whether this rank records them (1 without `if`).
// CHECK: func.func @decode(%{{[^:]+}}: tensor<?xi64>, %[[POS:[^:]+]]: tensor<?xi64>, %[[L:[^:]+]]: tensor<?x16xf32>, %[[VALID:[^:]+]]: i1)
// CHECK: %[[ONE:.+]] = arith.constant 1 : i64
// CHECK: %[[LB:.+]] = bufferization.to_buffer %[[L]] read_only
// CHECK: %[[LC:.+]] = memref.cast %[[LB]] : memref<?x16xf32, strided<[?, ?], offset: ?>> to memref<?x?xf32, strided<[?, ?], offset: ?>>
// CHECK: %[[PB:.+]] = bufferization.to_buffer %[[POS]] read_only
// CHECK: %[[PC:.+]] = memref.cast %[[PB]]
// CHECK: call @mfrt_step_logits_f32(%[[LC]], %[[PC]], %[[ONE]])
// CHECK: %[[V64:.+]] = arith.extui %[[VALID]] : i1 to i64
// CHECK: call @mfrt_step_logits_f32(%{{.+}}, %{{.+}}, %[[V64]])
// CHECK-NOT: moe.step_logits
module {
  func.func @prefill(%tokens: tensor<?xi64>) {
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %h = moe.embed %e, %tokens : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    return
  }
  func.func @decode(%tokens: tensor<?xi64>, %pos: tensor<?xi64>, %l: tensor<?x16xf32>, %valid: i1) {
    moe.step_logits %l, %pos : tensor<?x16xf32>, tensor<?xi64>
    moe.step_logits %l, %pos if %valid : tensor<?x16xf32>, tensor<?xi64>
    return
  }
}

// -----

// An eos id outside the vocabulary cannot end a request.
// expected-error @+1 {{convert-moe-to-runtime: eos_token_id 16 is outside the vocabulary (16 tokens)}}
module attributes {moe.eos_token_ids = array<i64: 16>} {
  func.func @prefill(%tokens: tensor<?xi64>) {
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %h = moe.embed %e, %tokens : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    return
  }
}
