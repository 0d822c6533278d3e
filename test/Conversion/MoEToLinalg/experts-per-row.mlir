// RUN: meshfold-opt %s -split-input-file --convert-moe-to-linalg="group-experts=false" \
// RUN: | FileCheck %s --implicit-check-not=scf.

// group-experts=false keeps the per-row lowering of the routed experts: no
// loops, every weight element gathered by the row's expert id, as the GPU
// kernels of the CUDA pipeline need.

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

// An expert per row: w1 and w3 gathered by the row's expert id, silu(h1) * h3,
// then w2 gathered by the same id; no routing weight.
// CHECK-LABEL: func.func @expert_ffn
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x64xf32>, %[[E:[^:]+]]: tensor<?xi64>, %[[W1:[^:]+]]: tensor<4x32x64xf32>, %[[W2:[^:]+]]: tensor<4x64x32xf32>, %[[W3:[^:]+]]: tensor<4x32x64xf32>)
// CHECK: %[[H:.+]]:2 = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[X]], %[[E]] : tensor<?x64xf32>, tensor<?xi64>)
// CHECK: ^bb0(%{{.+}}: f32, %[[EI:.+]]: i64,
// CHECK: %[[EX:.+]] = arith.index_cast %[[EI]] : i64 to index
// CHECK: tensor.extract %[[W1]][%[[EX]], %{{.+}}, %{{.+}}] : tensor<4x32x64xf32>
// CHECK: tensor.extract %[[W3]][%[[EX]], %{{.+}}, %{{.+}}] : tensor<4x32x64xf32>
// CHECK: -> (tensor<?x32xf32>, tensor<?x32xf32>)
// CHECK: %[[ACT:.+]] = linalg.generic {{.*}} ins(%[[H]]#0, %[[H]]#1 : tensor<?x32xf32>, tensor<?x32xf32>)
// CHECK: math.exp
// CHECK: arith.divf
// CHECK: arith.mulf
// CHECK: %[[Y:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[ACT]], %[[E]] : tensor<?x32xf32>, tensor<?xi64>)
// CHECK: tensor.extract %[[W2]][%{{.+}}, %{{.+}}, %{{.+}}] : tensor<4x64x32xf32>
// CHECK: -> tensor<?x64xf32>
// CHECK: return %[[Y]]
// CHECK-NOT: moe.
func.func @expert_ffn(%x: tensor<?x64xf32>, %e: tensor<?xi64>, %w1: tensor<4x32x64xf32>, %w2: tensor<4x64x32xf32>, %w3: tensor<4x32x64xf32>) -> tensor<?x64xf32> {
  %y = moe.expert_ffn %x, %e, %w1, %w2, %w3 : tensor<?x64xf32>, tensor<?xi64>, tensor<4x32x64xf32>, tensor<4x64x32xf32>, tensor<4x32x64xf32> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
