// RUN: meshfold-opt %s -split-input-file --convert-moe-to-linalg="fuse-attention=false" -verify-diagnostics | FileCheck %s

// fuse-attention=false: the materialised lowering. GQA: the KV head of query head h is h floordiv (n_h / n_kv) in the maps; the
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

// Attention over one key block: the same chain as moe.attention, plus the
// log-sum-exp [Tq, n_h] = row max + log(row sum), -inf for a fully masked row.
// CHECK-DAG: #[[$HI:.+]] = affine_map<(d0, d1) -> (d1, d0)>
// CHECK-DAG: #[[$IH:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @attention_partial
// CHECK-SAME: %[[QP:[^:]+]]: tensor<?xi64>, %[[KP:[^:]+]]: tensor<?xi64>
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %[[QP]], %[[KP]] :
// CHECK: arith.cmpi sle
// CHECK: %[[MAX:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: arith.maximumf
// CHECK: math.exp
// CHECK: %[[SUM:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: %[[OUT:.+]] = linalg.generic {{.*}} ins(%{{.+}}, %[[SUM]] : tensor<?x8x16xf32>, tensor<8x?xf32>) outs(%{{.+}} : tensor<?x8x16xf32>)
// CHECK: arith.divf
// CHECK: %[[LSE:.+]] = linalg.generic {indexing_maps = [#[[$HI]], #[[$HI]], #[[$IH]]], iterator_types = ["parallel", "parallel"]} ins(%[[MAX]], %[[SUM]] : tensor<8x?xf32>, tensor<8x?xf32>) outs(%{{.+}} : tensor<?x8xf32>)
// CHECK: ^bb0(%[[M:.+]]: f32, %[[S:.+]]: f32, %{{.+}}: f32):
// CHECK: %[[NOKEY:.+]] = arith.cmpf oeq, %[[M]], %[[NEGINF:.+]] : f32
// CHECK: %[[LOG:.+]] = math.log %[[S]] : f32
// CHECK: %[[V:.+]] = arith.addf %[[M]], %[[LOG]] : f32
// CHECK: arith.select %[[NOKEY]], %{{.+}}, %[[V]] : f32
// CHECK: return %[[OUT]], %[[LSE]]
// CHECK-NOT: moe.
func.func @attention_partial(%q: tensor<?x8x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>, %qp: tensor<?xi64>, %kp: tensor<?xi64>) -> (tensor<?x8x16xf32>, tensor<?x8xf32>) {
  %o, %l = moe.attention_partial %q, %k, %v, %qp, %kp {scale = 0.25 : f32} : tensor<?x8x16xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<?xi64>, tensor<?xi64> -> tensor<?x8x16xf32>, tensor<?x8xf32>
  return %o, %l : tensor<?x8x16xf32>, tensor<?x8xf32>
}

// -----

// Keys through a table of key tiles (a decode step's K/V cache read in
// place) need the fused lowering.
func.func @paged(%q: tensor<?x8x16xf32>, %k: tensor<?x2x16xf32>, %qp: tensor<?xi64>, %kp: tensor<?x64xi64>, %t: tensor<?x2xi64>) -> tensor<?x8x16xf32> {
  // expected-error @+1 {{keys through a table of key tiles need the fused attention (fuse-attention=true)}}
  %o = moe.attention %q, %k, %k, %qp, %kp tiles %t : tensor<?x2xi64> {scale = 0.25 : f32} : tensor<?x8x16xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<?xi64>, tensor<?x64xi64> -> tensor<?x8x16xf32>
  return %o : tensor<?x8x16xf32>
}
