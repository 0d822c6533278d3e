// RUN: meshfold-opt %s -split-input-file --convert-moe-to-linalg | FileCheck %s

// A linear layer is one generic: (t, o, i) with the weight read as [out, in].
// CHECK-DAG: #[[$X:.+]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[$W:.+]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG: #[[$Y:.+]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.+]]: tensor<?x64xf32>, %[[W:.+]]: tensor<128x64xf32>)
// CHECK: %[[T:.+]] = tensor.dim %[[X]], %{{.+}} : tensor<?x64xf32>
// CHECK: %[[E:.+]] = tensor.empty(%[[T]]) : tensor<?x128xf32>
// CHECK: %[[Z:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%[[E]] : tensor<?x128xf32>)
// CHECK: linalg.generic {indexing_maps = [#[[$X]], #[[$W]], #[[$Y]]], iterator_types = ["parallel", "parallel", "reduction"]}
// CHECK-SAME: ins(%[[X]], %[[W]] : tensor<?x64xf32>, tensor<128x64xf32>) outs(%[[Z]] : tensor<?x128xf32>)
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK-NOT: moe.
func.func @linear(%x: tensor<?x64xf32>, %w: tensor<128x64xf32>) -> tensor<?x128xf32> {
  %y = moe.linear %x, %w : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

// GQA: the KV head of query head h is h floordiv (n_h / n_kv) in the maps; the
// causal mask compares global positions; the softmax is max-shifted.
// CHECK-DAG: #[[$KV:.+]] = affine_map<(d0, d1, d2, d3) -> (d2, d0 floordiv 4, d3)>
// CHECK-DAG: #[[$V:.+]] = affine_map<(d0, d1, d2, d3) -> (d3, d1 floordiv 4, d2)>
// CHECK-LABEL: func.func @attention
// CHECK-SAME: %[[QP:[^:]+]]: tensor<?xi64>, %[[KP:[^:]+]]: tensor<?xi64>
// CHECK: linalg.generic {indexing_maps = [#{{.+}}, #[[$KV]], #{{.+}}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
// CHECK: ins(%{{.+}}, %[[QP]], %[[KP]] :
// CHECK: ^bb0(%[[S:.+]]: f32, %[[QI:.+]]: i64, %[[KI:.+]]: i64, %{{.+}}: f32):
// CHECK: arith.cmpi sle, %[[KI]], %[[QI]] : i64
// CHECK: arith.constant 2.500000e-01 : f32
// CHECK: arith.constant 0xFF800000 : f32
// CHECK: arith.maximumf
// CHECK: math.exp
// CHECK: linalg.generic {indexing_maps = [#{{.+}}, #[[$V]], #{{.+}}]
// CHECK: arith.divf
// CHECK-NOT: moe.
func.func @attention(%q: tensor<?x8x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>, %qp: tensor<?xi64>, %kp: tensor<?xi64>) -> tensor<?x8x16xf32> {
  %o = moe.attention %q, %k, %v, %qp, %kp {scale = 0.25 : f32} : tensor<?x8x16xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x16xf32>
  return %o : tensor<?x8x16xf32>
}

// -----

// RMSNorm: a sum of squares over d, then x * rsqrt(sum / d + eps) * w.
// CHECK-LABEL: func.func @rms_norm
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]
// CHECK: arith.constant 6.400000e+01 : f32
// CHECK: arith.constant 9.99999974E-6 : f32
// CHECK: math.rsqrt
// CHECK-NOT: moe.
func.func @rms_norm(%x: tensor<?x64xf32>, %w: tensor<64xf32>) -> tensor<?x64xf32> {
  %y = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// RoPE reads the partner element j +- d_h/2 and uses the position operand.
// CHECK-LABEL: func.func @rope
// CHECK: linalg.generic
// CHECK: tensor.extract
// CHECK: math.powf
// CHECK: math.cos
// CHECK: math.sin
// CHECK-NOT: moe.
func.func @rope(%x: tensor<?x4x16xf32>, %p: tensor<?xi64>) -> tensor<?x4x16xf32> {
  %y = moe.rope %x, %p {theta = 1.0e6 : f32} : tensor<?x4x16xf32>, tensor<?xi64> -> tensor<?x4x16xf32>
  return %y : tensor<?x4x16xf32>
}

// -----

// Top-2 routing: two arg-max rounds (the second excludes the first choice),
// then the softmax over the chosen two.
// CHECK-LABEL: func.func @router
// CHECK: %[[LOGITS:.+]] = linalg.generic {{.*}} outs(%{{.+}} : tensor<?x32xf32>)
// CHECK: %[[FIRST:.+]]:2 = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[LOGITS]] : tensor<?x32xf32>)
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[LOGITS]], %[[FIRST]]#1 : tensor<?x32xf32>, tensor<?xi64>)
// CHECK: arith.cmpi eq
// CHECK: math.exp
// CHECK: -> (tensor<?x2xf32>, tensor<?x2xi64>)
// CHECK-NOT: moe.
func.func @router(%x: tensor<?x64xf32>, %g: tensor<32x64xf32>) -> (tensor<?x2xf32>, tensor<?x2xi64>) {
  %w, %i = moe.router %x, %g {top_k = 2 : i64, renormalize} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x2xf32>, tensor<?x2xi64>
  return %w, %i : tensor<?x2xf32>, tensor<?x2xi64>
}

// -----

// Experts gather their weights by the routed index (tensor.extract) and apply
// silu(w1 x) * (w3 x), then w2 and the routing weight.
// CHECK-LABEL: func.func @experts
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]
// CHECK-COUNT-2: tensor.extract %{{.+}}[%{{.+}}, %{{.+}}, %{{.+}}] : tensor<32x128x64xf32>
// CHECK: math.exp
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction", "reduction"]
// CHECK: tensor.extract %{{.+}}[%{{.+}}, %{{.+}}, %{{.+}}] : tensor<32x64x128xf32>
// CHECK-NOT: moe.
func.func @experts(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<32x128x64xf32>, %w2: tensor<32x64x128xf32>, %w3: tensor<32x128x64xf32>) -> tensor<?x64xf32> {
  %y = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<32x128x64xf32>, tensor<32x64x128xf32>, tensor<32x128x64xf32> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// The LM head reads only row T-1.
// CHECK-LABEL: func.func @lm_head
// CHECK-SAME: (%[[X:.+]]: tensor<?x64xf32>
// CHECK: %[[T:.+]] = tensor.dim %[[X]]
// CHECK: %[[LAST:.+]] = arith.subi %[[T]], %{{.+}} : index
// CHECK: linalg.generic
// CHECK: tensor.extract %[[X]][%[[LAST]], %{{.+}}] : tensor<?x64xf32>
// CHECK: -> tensor<512xf32>
func.func @lm_head(%x: tensor<?x64xf32>, %w: tensor<512x64xf32>) -> tensor<512xf32> {
  %y = moe.lm_head %x, %w : tensor<?x64xf32>, tensor<512x64xf32> -> tensor<512xf32>
  return %y : tensor<512xf32>
}

// -----

// Embedding is a gather by token id; positions are 0..T-1.
// CHECK-LABEL: func.func @embed_positions
// CHECK: linalg.index 0
// CHECK: arith.index_cast %{{.+}} : index to i64
// CHECK: arith.index_cast %{{.+}} : i64 to index
// CHECK: tensor.extract %{{.+}}[%{{.+}}, %{{.+}}] : tensor<512x64xf32>
// CHECK-NOT: moe.
func.func @embed_positions(%t: tensor<?xi64>, %e: tensor<512x64xf32>) -> (tensor<?xi64>, tensor<?x64xf32>) {
  %p = moe.positions %t : tensor<?xi64> -> tensor<?xi64>
  %h = moe.embed %e, %t : tensor<512x64xf32>, tensor<?xi64> -> tensor<?x64xf32>
  return %p, %h : tensor<?xi64>, tensor<?x64xf32>
}

// -----

// Weights and K/V outputs are left for convert-moe-to-runtime.
// CHECK-LABEL: func.func @leaves_io
// CHECK: moe.param
// CHECK: moe.kv_cache
func.func @leaves_io(%k: tensor<?x2x16xf32>, %p: tensor<?xi64>) -> tensor<64xf32> {
  %w = moe.param "model.norm.weight" : tensor<64xf32>
  moe.kv_cache %k, %k, %p {layer = 0 : i64} : tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<?xi64>
  return %w : tensor<64xf32>
}
