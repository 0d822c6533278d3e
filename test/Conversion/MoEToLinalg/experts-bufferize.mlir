// RUN: meshfold-opt %s -split-input-file --convert-moe-to-linalg --canonicalize --cse \
// RUN:   --one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" \
// RUN:   --buffer-deallocation-pipeline | FileCheck %s

// The grouped experts bufferize in place, as in the lower-to-buffers
// pipeline: the loop-carried index tensors and the sorted result are single
// buffers, h1 and h3 get one buffer each (no copy of a shared zero init), and
// each expert's last contraction writes its rows of the sorted result
// through a subview.
// CHECK-LABEL: func.func @experts
// CHECK-NOT: memref.copy
// CHECK: %[[SORTED:.+]] = memref.alloc(%{{.+}}) {{.*}} : memref<?x64xf32>
// CHECK: scf.for
// CHECK: scf.if
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %{{.+}} : memref<?x64xf32>, memref<128x64xf32, strided<[64, 1], offset: ?>>) outs(%[[H1:.+]] : memref<?x128xf32>)
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %{{.+}} : memref<?x64xf32>, memref<128x64xf32, strided<[64, 1], offset: ?>>) outs(%[[H3:.+]] : memref<?x128xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[H3]] : memref<?x128xf32>) outs(%[[H1]] : memref<?x128xf32>)
// CHECK: %[[DST:.+]] = memref.subview %[[SORTED]]
// CHECK: linalg.fill ins(%{{.+}} : f32) outs(%[[DST]] :
// CHECK: linalg.generic {{.*}} outs(%[[DST]] :
// CHECK-NOT: memref.copy
// CHECK: return
func.func @experts(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi64>, %w1: tensor<8x128x64xf32>, %w2: tensor<8x64x128xf32>, %w3: tensor<8x128x64xf32>) -> tensor<?x64xf32> {
  %y = moe.experts %x, %w, %i, %w1, %w2, %w3 : tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi64>, tensor<8x128x64xf32>, tensor<8x64x128xf32>, tensor<8x128x64xf32> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// CHECK-LABEL: func.func @expert_ffn
// CHECK-NOT: memref.copy
// CHECK: return
func.func @expert_ffn(%x: tensor<?x64xf32>, %e: tensor<?xi64>, %w1: tensor<4x32x64xbf16>, %w2: tensor<4x64x32xbf16>, %w3: tensor<4x32x64xbf16>) -> tensor<?x64xf32> {
  %y = moe.expert_ffn %x, %e, %w1, %w2, %w3 : tensor<?x64xf32>, tensor<?xi64>, tensor<4x32x64xbf16>, tensor<4x64x32xbf16>, tensor<4x32x64xbf16> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
