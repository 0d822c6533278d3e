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

// A decode step: moe.kv_history becomes the runtime's K/V cache read in
// place: mfrt_kv_key_tiles counts the step's key tiles (of at most
// key-tile rows, 64 by default), mfrt_kv_key_tiles_fill fills their table
// ([n, 2]: first row, rows) and positions ([n, 64]), mfrt_kv_cache_rows
// says how many rows the tiles index, and mf.kv_rows are the cache's K and
// V rows (the runtime's memory). Each attention over the history takes them
// through `tiles`. @decode gets the C interface beside @prefill, and the
// manifest names it and the model's eos ids.
// CHECK-DAG: func.func private @mfrt_kv_key_tiles(i64, memref<?xi64, strided<[?], offset: ?>>, i64) -> i64 attributes {llvm.emit_c_interface}
// CHECK-DAG: func.func private @mfrt_kv_key_tiles_fill(i64, memref<?xi64, strided<[?], offset: ?>>, memref<?x?xi64, strided<[?, ?], offset: ?>>, memref<?x?xi64, strided<[?, ?], offset: ?>>) attributes {llvm.emit_c_interface}
// CHECK-DAG: func.func private @mfrt_kv_cache_rows(i64) -> i64 attributes {llvm.emit_c_interface}
// CHECK: func.func @prefill({{.*}}) attributes {llvm.emit_c_interface}
// CHECK: func.func @decode({{.*}}) attributes {llvm.emit_c_interface}
// CHECK: %[[L:.*]] = arith.constant 3 : i64
// CHECK: %[[SP:.*]] = memref.cast %{{.*}} : memref<?xi64, strided<[?], offset: ?>> to memref<?xi64, strided<[?], offset: ?>>
// CHECK: %[[C:.*]] = arith.constant 64 : i64
// CHECK: %[[N:.*]] = call @mfrt_kv_key_tiles(%[[L]], %[[SP]], %[[C]])
// CHECK: %[[TILES:.*]] = arith.index_cast %[[N]] : i64 to index
// CHECK: %[[T:.*]] = memref.alloc(%[[TILES]]) : memref<?x2xi64>
// CHECK: %[[P:.*]] = memref.alloc(%[[TILES]]) : memref<?x64xi64>
// CHECK: call @mfrt_kv_key_tiles_fill(%[[L]], %[[SP]], %{{.*}}, %{{.*}})
// CHECK: %[[R64:.*]] = call @mfrt_kv_cache_rows(%[[L]])
// CHECK: %[[ROWS:.*]] = arith.index_cast %[[R64]] : i64 to index
// All KV heads: the first is 0.
// CHECK: %[[H0:.*]] = arith.constant 0 : i64
// CHECK: %[[K:.*]] = mf.kv_rows %[[ROWS]], %[[H0]] {layer = 3 : i64, tensor = 0 : i64} : memref<?x1x4xf32>
// CHECK: %[[KT:.*]] = bufferization.to_tensor %[[K]] restrict : memref<?x1x4xf32> to tensor<?x1x4xf32>
// CHECK: %[[V:.*]] = mf.kv_rows %[[ROWS]], %[[H0]] {layer = 3 : i64, tensor = 1 : i64} : memref<?x1x4xf32>
// CHECK: %[[VT:.*]] = bufferization.to_tensor %[[V]] restrict
// CHECK: %[[TT:.*]] = bufferization.to_tensor %[[T]] restrict : memref<?x2xi64> to tensor<?x2xi64>
// CHECK: %[[PT:.*]] = bufferization.to_tensor %[[P]] restrict : memref<?x64xi64> to tensor<?x64xi64>
// CHECK: moe.attention %{{.*}}, %[[KT]], %[[VT]], %{{.*}}, %[[PT]] tiles %[[TT]] : tensor<?x2xi64>
// A partitioned step's history holds the rank's KV heads: the first is
// passed on.
// CHECK: %[[OFF:.*]] = arith.index_cast %arg4 : index to i64
// CHECK: mf.kv_rows %{{.*}}, %[[OFF]] {layer = 3 : i64, tensor = 0 : i64}
// CHECK: moe.attention_partial {{.*}} tiles
// CHECK-NOT: moe.kv_history
// CHECK: llvm.mlir.global external constant @__mf_manifest
// CHECK-SAME: decode decode\0Aeos 2 5\0A
module attributes {moe.eos_token_ids = array<i64: 2, 5>} {
  func.func @prefill(%tokens: tensor<?xi64>) {
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %h = moe.embed %e, %tokens : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    return
  }
  func.func @decode(%tokens: tensor<?xi64>, %pos: tensor<?xi64>, %k: tensor<?x1x4xf32>, %v: tensor<?x1x4xf32>, %first: index, %q: tensor<?x2x4xf32>) -> (tensor<?x2x4xf32>, tensor<?x2x4xf32>) {
    %hk, %hv, %hp = moe.kv_history %k, %v, %pos {layer = 3 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64> -> tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
    %a = moe.attention %q, %hk, %hv, %pos, %hp {scale = 0.5 : f32} : tensor<?x2x4xf32>, tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x4xf32>
    %lk, %lv, %lp = moe.kv_history %k, %v, %pos heads from %first {layer = 3 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64> -> tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
    %b, %lse = moe.attention_partial %q, %lk, %lv, %pos, %lp {scale = 0.5 : f32} : tensor<?x2x4xf32>, tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x4xf32>, tensor<?x2xf32>
    return %a, %b : tensor<?x2x4xf32>, tensor<?x2x4xf32>
  }
}

// -----

// A history that feeds anything but an attention's keys cannot be read in
// place.
module {
  func.func @prefill(%tokens: tensor<?xi64>) {
    return
  }
  func.func @decode(%tokens: tensor<?xi64>, %pos: tensor<?xi64>, %k: tensor<?x1x4xf32>, %v: tensor<?x1x4xf32>) -> tensor<?x1x4xf32> {
    %hk, %hv, %hp = moe.kv_history %k, %v, %pos {layer = 0 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64> -> tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
    // expected-error @+1 {{a K/V history is read in place through key tiles: only an attention's key, value and key positions may use it}}
    return %hk : tensor<?x1x4xf32>
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

// A step's head rows: the runtime counts them (mfrt_step_head_rows of the
// positions) and keeps them, the rows are allocated and the runtime fills
// them.
// CHECK: func.func @decode(%{{[^:]+}}: tensor<?xi64>, %[[POS:[^:]+]]: tensor<?xi64>) -> tensor<?xi64>
// CHECK: %[[PB:.+]] = bufferization.to_buffer %[[POS]] read_only
// CHECK: %[[PC:.+]] = memref.cast %[[PB]] : memref<?xi64, strided<[?], offset: ?>> to memref<?xi64, strided<[?], offset: ?>>
// CHECK: %[[N64:.+]] = call @mfrt_step_head_rows(%[[PC]]) : (memref<?xi64, strided<[?], offset: ?>>) -> i64
// CHECK: %[[N:.+]] = arith.index_cast %[[N64]] : i64 to index
// CHECK: %[[ROWS:.+]] = memref.alloc(%[[N]]) : memref<?xi64>
// CHECK: %[[RC:.+]] = memref.cast %[[ROWS]] : memref<?xi64> to memref<?xi64, strided<[?], offset: ?>>
// CHECK: call @mfrt_step_head_rows_fill(%[[RC]])
// CHECK: %[[T:.+]] = bufferization.to_tensor %[[ROWS]] restrict : memref<?xi64> to tensor<?xi64>
// CHECK: return %[[T]]
// CHECK-NOT: moe.step_head_rows
module {
  func.func @prefill(%tokens: tensor<?xi64>) {
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %h = moe.embed %e, %tokens : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    return
  }
  func.func @decode(%tokens: tensor<?xi64>, %pos: tensor<?xi64>) -> tensor<?xi64> {
    %rows = moe.step_head_rows %pos : tensor<?xi64> -> tensor<?xi64>
    return %rows : tensor<?xi64>
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
