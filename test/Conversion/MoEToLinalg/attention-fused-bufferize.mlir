// RUN: meshfold-opt %s --convert-moe-to-linalg | FileCheck %s --check-prefix=LINALG
// RUN: meshfold-opt %s --convert-moe-to-linalg --convert-elementwise-to-linalg \
// RUN:   --canonicalize --cse \
// RUN:   --one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" \
// RUN:   --buffer-deallocation-pipeline | FileCheck %s
// RUN: meshfold-opt %s --convert-moe-to-linalg="attention-tile=32" | FileCheck %s --check-prefix=TILE32
// RUN: not meshfold-opt %s --convert-moe-to-linalg="attention-tile=0" 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: error: attention-tile must be positive, got 0
// With attention-tile=32 the keys are tiles of 32 and the forall steps over
// 32-query tiles.
// TILE32: arith.ceildivui {{.*}}, %c32
// TILE32: scf.forall {{.*}} step (1, 32)

// The fused attention's memory is O(T * d_h) plus tiles: no tensor has two
// token-count dims (T = 200 here; tiles are at most 64 x 64).
// LINALG-LABEL: func.func @attention_partial
// LINALG-NOT: 200x200
// LINALG: scf.forall
// LINALG-NOT: 200x200
// LINALG: return

// One-shot bufferization keeps it in place: the only full-size buffers are
// K transposed to [n_kv, d_h, T] and the two results, allocated once before
// the loops; each work item writes its output and log-sum-exp tiles straight
// into them (no copy). Inside the loops only tile buffers are allocated
// ([Bq] rows, [Bq, d_h], [Bq, Bk]) and freed in the same iteration.
// CHECK-LABEL: func.func @attention_partial
// CHECK-NOT: memref.copy
// CHECK: %[[KT:.+]] = memref.alloc() {{.*}} : memref<2x8x200xf32>
// CHECK: linalg.transpose ins(%{{.+}} : memref<200x2x8xf32>) outs(%[[KT]] : memref<2x8x200xf32>) permutation = [1, 2, 0]
// CHECK-NOT: memref.copy
// CHECK: %[[OUT:.+]] = memref.alloc() {{.*}} : memref<200x4x8xf32>
// CHECK-NOT: memref.copy
// CHECK: %[[LSE:.+]] = memref.alloc() {{.*}} : memref<200x4xf32>
// CHECK-NOT: memref.copy
// CHECK: scf.forall
// CHECK-NOT: {{memref.alloc.*200|memref.copy.*200|200x200}}
// CHECK: scf.for
// CHECK-NOT: {{memref.alloc.*200|memref.copy.*200|200x200}}
// CHECK: memref.alloc({{.*}}) {{.*}} : memref<?x?xf32>
// CHECK-NOT: {{memref.alloc.*200|memref.copy.*200|200x200}}
// CHECK: memref.dealloc {{.*}} : memref<?x?xf32>
// CHECK-NOT: {{memref.alloc.*200|memref.copy.*200|200x200}}
// CHECK: %[[OSLOT:.+]] = memref.subview %[[OUT]]
// CHECK: linalg.generic {{.*}} outs(%[[OSLOT]] :
// CHECK: %[[LSLOT:.+]] = memref.subview %[[LSE]]
// CHECK: linalg.generic {{.*}} outs(%[[LSLOT]] :
// CHECK-NOT: {{memref.alloc.*200|memref.copy.*200|200x200}}
// CHECK: return %[[OUT]], %[[LSE]]
func.func @attention_partial(%q: tensor<200x4x8xf32>, %k: tensor<200x2x8xf32>, %v: tensor<200x2x8xf32>, %qp: tensor<200xi64>, %kp: tensor<200xi64>) -> (tensor<200x4x8xf32>, tensor<200x4xf32>) {
  %o, %l = moe.attention_partial %q, %k, %v, %qp, %kp {scale = 0.25 : f32} : tensor<200x4x8xf32>, tensor<200x2x8xf32>, tensor<200x2x8xf32>, tensor<200xi64>, tensor<200xi64> -> tensor<200x4x8xf32>, tensor<200x4xf32>
  return %o, %l : tensor<200x4x8xf32>, tensor<200x4xf32>
}
