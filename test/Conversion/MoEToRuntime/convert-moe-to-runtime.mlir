// RUN: meshfold-opt %s -split-input-file --convert-moe-to-runtime -verify-diagnostics | FileCheck %s

// Weights become runtime buffers (one id per distinct name, in order of first
// use), K/V outputs become calls with fully dynamic strided buffers, the entry
// gets the C interface, and the manifest lists dimensions and weights.
// CHECK-LABEL: module
// CHECK: func.func private @mfrt_kv_cache_f32(i64, memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>, memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>, memref<?xi64, strided<[?], offset: ?>>) attributes {llvm.emit_c_interface}
// CHECK: func.func @prefill
// CHECK-SAME: attributes {llvm.emit_c_interface}
// CHECK: %[[E:.+]] = mf.weight 0, "model.embed_tokens.weight" : memref<16x8xf32>
// CHECK: bufferization.to_tensor %[[E]] restrict : memref<16x8xf32> to tensor<16x8xf32>
// CHECK: %[[K:.+]] = bufferization.to_buffer %arg2 read_only : tensor<?x1x4xf32> to memref<?x1x4xf32, strided<[?, ?, ?], offset: ?>>
// CHECK: %[[KC:.+]] = memref.cast %[[K]]
// CHECK: call @mfrt_kv_cache_f32(%{{.+}}, %[[KC]], %{{.+}}, %{{.+}})
// The same name used twice keeps its id.
// CHECK: mf.weight 0, "model.embed_tokens.weight" : memref<16x8xf32>
// CHECK-NOT: moe.param
// CHECK-NOT: moe.kv_cache
// CHECK: llvm.mlir.global external constant @__mf_manifest("meshfold-manifest 1\0Aentry prefill\0Ahidden 8\0Avocab 16\0Alayers 1\0Aheads 2\0Akv_heads 1\0Ahead_dim 4\0A
// CHECK-SAME: param 0 model.embed_tokens.weight f32 2 16 8\0Aend\0A\00")
module {
  func.func @prefill(%tok: tensor<?xi64>, %q: tensor<?x2x4xf32>, %k: tensor<?x1x4xf32>) -> tensor<16xf32> {
    %ps = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %h = moe.embed %e, %tok : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    moe.kv_cache %k, %k, %ps {layer = 0 : i64} : tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>
    %a = moe.attention %q, %k, %k, %ps, %ps {scale = 0.5 : f32} : tensor<?x2x4xf32>, tensor<?x1x4xf32>, tensor<?x1x4xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x2x4xf32>
    %head = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %l = moe.lm_head %h, %head : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<16xf32>
    return %l : tensor<16xf32>
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
