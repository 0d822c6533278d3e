// RUN: meshfold-opt %s -split-input-file --convert-moe-to-runtime -verify-diagnostics | FileCheck %s

// Weights become runtime buffers (one id per distinct name, in order of first
// use), K/V and logits outputs become calls with fully dynamic strided
// buffers, the entry gets the C interface, and the manifest lists dimensions
// and weights.
// CHECK-LABEL: module
// CHECK-DAG: func.func private @mfrt_kv_cache_f32(i64, memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>, memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>, i64) attributes {llvm.emit_c_interface}
// CHECK-DAG: func.func private @mfrt_logits_f32(memref<?xf32, strided<[?], offset: ?>>, i64) attributes {llvm.emit_c_interface}
// CHECK: func.func @prefill
// CHECK-SAME: attributes {llvm.emit_c_interface}
// CHECK: %[[E:.+]] = mf.weight 0, "model.embed_tokens.weight" : memref<16x8xf32>
// CHECK: bufferization.to_tensor %[[E]] restrict : memref<16x8xf32> to tensor<16x8xf32>
// A cache without a head offset passes head offset 0.
// CHECK: %[[L0:.+]] = arith.constant 0 : i64
// CHECK: %[[H0:.+]] = arith.constant 0 : i64
// CHECK: %[[K:.+]] = bufferization.to_buffer %arg2 read_only : tensor<?x1x4xf32> to memref<?x1x4xf32, strided<[?, ?, ?], offset: ?>>
// CHECK: %[[KC:.+]] = memref.cast %[[K]]
// CHECK: call @mfrt_kv_cache_f32(%[[L0]], %[[KC]], %{{.+}}, %{{.+}}, %[[H0]])
// With `heads from %h`, the offset is %h as an i64.
// CHECK: %[[L1:.+]] = arith.constant 1 : i64
// CHECK: %[[H1:.+]] = arith.index_cast %arg3 : index to i64
// CHECK: call @mfrt_kv_cache_f32(%[[L1]], %{{.+}}, %{{.+}}, %{{.+}}, %[[H1]])
// The same name used twice keeps its id.
// CHECK: mf.weight 0, "model.embed_tokens.weight" : memref<16x8xf32>
// CHECK: %[[LOG:.+]] = moe.lm_head
// Unconditional logits pass valid = 1.
// CHECK: %[[LB:.+]] = bufferization.to_buffer %[[LOG]] read_only : tensor<16xf32> to memref<16xf32, strided<[?], offset: ?>>
// CHECK: %[[LC:.+]] = memref.cast %[[LB]] : memref<16xf32, strided<[?], offset: ?>> to memref<?xf32, strided<[?], offset: ?>>
// CHECK: %[[ONE:.+]] = arith.constant 1 : i64
// CHECK: call @mfrt_logits_f32(%[[LC]], %[[ONE]])
// Logits `if %valid` pass the i1 zero-extended.
// CHECK: %[[LC2:.+]] = memref.cast
// CHECK: %[[V:.+]] = arith.extui %arg4 : i1 to i64
// CHECK: call @mfrt_logits_f32(%[[LC2]], %[[V]])
// CHECK-NOT: moe.param
// CHECK-NOT: moe.kv_cache
// CHECK-NOT: moe.logits
// CHECK: llvm.mlir.global external constant @__mf_manifest("meshfold-manifest 1\0Aentry prefill\0Ahidden 8\0Avocab 16\0Alayers 1\0Aheads 2\0Akv_heads 1\0Ahead_dim 4\0A
// CHECK-SAME: param 0 model.embed_tokens.weight f32 2 16 8\0Aend\0A\00")
module {
  func.func @prefill(%tok: tensor<?xi64>, %q: tensor<?x2x4xf32>, %k: tensor<?x1x4xf32>, %h: index, %valid: i1) {
    %ps = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %x = moe.embed %e, %tok : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    moe.kv_cache %k, %k, %ps {layer = 0 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
    moe.kv_cache %k, %k, %ps heads from %h {layer = 1 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
    %a = moe.attention %q, %k, %k, %ps, %ps {scale = 0.5 : f32} : tensor<?x2x4xf32>, tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x4xf32>
    %head = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %t = tensor.dim %tok, %c0 : tensor<?xi64>
    %last = arith.subi %t, %c1 : index
    %l = moe.lm_head %x, %head, %ps, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    moe.logits %l if %valid : tensor<16xf32>
    return
  }
}

// -----

// Inside a moe.layer (as the importer emits them), weights and K/V outputs are
// bound in place; the layer itself stays for convert-moe-to-linalg.
// CHECK-LABEL: module
// CHECK: func.func @prefill
// CHECK: moe.layer 0
// CHECK: ^bb0(%{{.+}}: tensor<?x8xf32>, [[P:%.+]]: tensor<?xi64>, [[K:%.+]]: tensor<?x1x4xf32>):
// CHECK: mf.weight 0, "model.layers.0.input_layernorm.weight" : memref<8xf32>
// CHECK: bufferization.to_buffer [[K]] read_only
// CHECK: bufferization.to_buffer [[P]] read_only
// CHECK: call @mfrt_kv_cache_f32(
// CHECK: moe.yield
// CHECK-NOT: moe.param
// CHECK-NOT: moe.kv_cache
// CHECK: param 0 model.layers.0.input_layernorm.weight f32 1 8\0Aend
module {
  func.func @prefill(%tok: tensor<?xi64>, %x: tensor<?x8xf32>, %k: tensor<?x1x4xf32>) {
    %ps = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %y = moe.layer 0 (%x, %ps, %k) : (tensor<?x8xf32>, tensor<?xi64>, tensor<?x1x4xf32>) -> tensor<?x8xf32> {
    ^bb0(%h: tensor<?x8xf32>, %p: tensor<?xi64>, %kk: tensor<?x1x4xf32>):
      %w = moe.param "model.layers.0.input_layernorm.weight" : tensor<8xf32>
      %n = moe.rms_norm %h, %w {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
      moe.kv_cache %kk, %kk, %p {layer = 0 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
      moe.yield %n : tensor<?x8xf32>
    }
    return
  }
}

// -----

// A module without the entry function is rejected.
// expected-error @+1 {{no entry function @prefill}}
module {
  func.func @other() {
    return
  }
}

// -----

// The CPU target computes in f32.
module {
  func.func @prefill(%tok: tensor<?xi64>) -> tensor<16x8xbf16> {
    // expected-error @+1 {{the CPU target computes in f32; weight 'w' is 'bf16'}}
    %w = moe.param "w" : tensor<16x8xbf16>
    return %w : tensor<16x8xbf16>
  }
}

// -----

// One name with two shapes is an error.
module {
  func.func @prefill(%tok: tensor<?xi64>) -> tensor<4xf32> {
    %a = moe.param "w" : tensor<4xf32>
    // expected-error @+1 {{weight 'w' used as 'tensor<8xf32>' and as 'tensor<4xf32>'}}
    %b = moe.param "w" : tensor<8xf32>
    return %a : tensor<4xf32>
  }
}
