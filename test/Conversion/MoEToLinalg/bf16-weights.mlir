// RUN: meshfold-opt %s --convert-moe-to-runtime="weight-dtype=bf16" --convert-moe-to-linalg | FileCheck %s
// RUN: meshfold-opt %s --convert-moe-to-runtime | FileCheck %s --check-prefix=F32
// RUN: not meshfold-opt %s --convert-moe-to-runtime="weight-dtype=f16" 2>&1 | FileCheck %s --check-prefix=BAD

// weight-dtype=bf16: every weight is a bf16 runtime buffer (and bf16 in the
// manifest); every linalg body that reads a weight widens it with arith.extf
// and accumulates in f32, so activations and results stay f32.

// CHECK-LABEL: func.func @prefill

// Embedding: the bf16 row element is widened into the f32 hidden state.
// CHECK: %[[E:.+]] = mf.weight 0, "model.embed_tokens.weight" : memref<16x8xbf16>
// CHECK: %[[ET:.+]] = bufferization.to_tensor %[[E]] restrict : memref<16x8xbf16> to tensor<16x8xbf16>
// CHECK: linalg.generic {{.*}} outs(%{{.+}} : tensor<?x8xf32>)
// CHECK: %[[EV:.+]] = tensor.extract %[[ET]][%{{.+}}, %{{.+}}] : tensor<16x8xbf16>
// CHECK: %[[EW:.+]] = arith.extf %[[EV]] : bf16 to f32
// CHECK: linalg.yield %[[EW]] : f32

// RMSNorm: the bf16 scale is widened.
// CHECK: %[[N:.+]] = mf.weight 1, "model.norm.weight" : memref<8xbf16>
// CHECK: %[[NT:.+]] = bufferization.to_tensor %[[N]] restrict : memref<8xbf16> to tensor<8xbf16>
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %{{.+}}, %[[NT]] : tensor<?x8xf32>, tensor<?xf32>, tensor<8xbf16>) outs(%{{.+}} : tensor<?x8xf32>)
// CHECK: ^bb0(%{{.+}}: f32, %{{.+}}: f32, %[[NS:.+]]: bf16, %{{.+}}: f32):
// CHECK: arith.extf %[[NS]] : bf16 to f32

// Linear: bf16 weight, f32 accumulator (fill of f32 zeros, mulf and addf in
// f32).
// CHECK: %[[Q:.+]] = mf.weight 2, "q" : memref<4x8xbf16>
// CHECK: %[[QT:.+]] = bufferization.to_tensor %[[Q]]
// CHECK: linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<?x4xf32>)
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %[[QT]] : tensor<?x8xf32>, tensor<4x8xbf16>) outs(%{{.+}} : tensor<?x4xf32>)
// CHECK: ^bb0(%[[X:.+]]: f32, %[[W:.+]]: bf16, %[[ACC:.+]]: f32):
// CHECK: %[[WW:.+]] = arith.extf %[[W]] : bf16 to f32
// CHECK: %[[M:.+]] = arith.mulf %[[X]], %[[WW]] : f32
// CHECK: %[[S:.+]] = arith.addf %[[ACC]], %[[M]] : f32
// CHECK: linalg.yield %[[S]] : f32

// Router: the gate is a bf16 linear too.
// CHECK: mf.weight 3, "gate" : memref<4x8xbf16>
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %{{.+}} : tensor<?x8xf32>, tensor<4x8xbf16>) outs(%{{.+}} : tensor<?x4xf32>)
// CHECK: arith.extf %{{.+}} : bf16 to f32

// Experts: each expert's slice of w1/w3 and w2 stays bf16 and is widened in
// the contraction's body; h1, h3 and y accumulate in f32.
// CHECK: mf.weight 4, "w1.{e}" : memref<4x6x8xbf16>
// CHECK: mf.weight 5, "w2.{e}" : memref<4x8x6xbf16>
// CHECK: mf.weight 6, "w3.{e}" : memref<4x6x8xbf16>
// CHECK: scf.for
// CHECK: tensor.extract_slice %{{.+}} : tensor<4x6x8xbf16> to tensor<6x8xbf16>
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %{{.+}} : tensor<?x8xf32>, tensor<6x8xbf16>) outs(%{{.+}} : tensor<?x6xf32>)
// CHECK-NEXT: ^bb0(%{{.+}}: f32, %[[W1E:.+]]: bf16, %{{.+}}: f32):
// CHECK-NEXT: arith.extf %[[W1E]] : bf16 to f32
// CHECK: tensor.extract_slice %{{.+}} : tensor<4x6x8xbf16> to tensor<6x8xbf16>
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %{{.+}} : tensor<?x8xf32>, tensor<6x8xbf16>) outs(%{{.+}} : tensor<?x6xf32>)
// CHECK-NEXT: ^bb0(%{{.+}}: f32, %[[W3E:.+]]: bf16, %{{.+}}: f32):
// CHECK-NEXT: arith.extf %[[W3E]] : bf16 to f32
// CHECK: tensor.extract_slice %{{.+}} : tensor<4x8x6xbf16> to tensor<8x6xbf16>
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %{{.+}} : tensor<?x6xf32>, tensor<8x6xbf16>) outs(%{{.+}} : tensor<?x8xf32>)
// CHECK-NEXT: ^bb0(%{{.+}}: f32, %[[W2E:.+]]: bf16, %{{.+}}: f32):
// CHECK-NEXT: arith.extf %[[W2E]] : bf16 to f32

// LM head: bf16 weight, f32 logits.
// CHECK: %[[H:.+]] = mf.weight 7, "lm_head.weight" : memref<16x8xbf16>
// CHECK: %[[HT:.+]] = bufferization.to_tensor %[[H]]
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %[[HT]] : tensor<8xf32>, tensor<16x8xbf16>) outs(%{{.+}} : tensor<16xf32>)
// CHECK: arith.extf %{{.+}} : bf16 to f32

// CHECK-NOT: moe.
// CHECK: llvm.mlir.global external constant @__mf_manifest
// CHECK-SAME: param 0 model.embed_tokens.weight bf16 2 16 8\0Aparam 1 model.norm.weight bf16 1 8\0A
// CHECK-SAME: param 7 lm_head.weight bf16 2 16 8\0Aend

// The default stays f32: f32 buffers, f32 in the manifest, no extension.
// F32: mf.weight 0, "model.embed_tokens.weight" : memref<16x8xf32>
// F32-NOT: bf16
// F32: param 0 model.embed_tokens.weight f32 2 16 8\0A

// BAD: error: convert-moe-to-runtime: weight-dtype must be f32 or bf16, got 'f16'

module {
  func.func @prefill(%tok: tensor<?xi64>) {
    %e = moe.param "model.embed_tokens.weight" : tensor<16x8xf32>
    %x = moe.embed %e, %tok : tensor<16x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
    %n = moe.param "model.norm.weight" : tensor<8xf32>
    %h = moe.rms_norm %x, %n {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %q = moe.param "q" : tensor<4x8xf32>
    %y = moe.linear %h, %q : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
    %g = moe.param "gate" : tensor<4x8xf32>
    %w, %i = moe.router %h, %g {top_k = 2 : i64} : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
    %w1 = moe.param "w1.{e}" : tensor<4x6x8xf32>
    %w2 = moe.param "w2.{e}" : tensor<4x8x6xf32>
    %w3 = moe.param "w3.{e}" : tensor<4x6x8xf32>
    %z = moe.experts %h, %w, %i, %w1, %w2, %w3 : tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<4x6x8xf32>, tensor<4x8x6xf32>, tensor<4x6x8xf32> -> tensor<?x8xf32>
    %head = moe.param "lm_head.weight" : tensor<16x8xf32>
    %ps = moe.positions %tok : tensor<?xi64> -> tensor<?xi64>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %t = tensor.dim %tok, %c0 : tensor<?xi64>
    %last = arith.subi %t, %c1 : index
    %l = moe.lm_head %z, %head, %ps, %last : tensor<?x8xf32>, tensor<16x8xf32>, tensor<?xi64> -> tensor<16xf32>
    moe.logits %l : tensor<16xf32>
    return
  }
}
