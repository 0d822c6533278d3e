// RUN: meshfold-opt %s -split-input-file --mf-linalg-parallel-rows="blocks=8" | FileCheck %s
// RUN: meshfold-opt %s -split-input-file --mf-linalg-parallel-rows="blocks=8 min-elements=8192" | FileCheck %s --check-prefix=SMALL
// RUN: not meshfold-opt %s -split-input-file --mf-linalg-parallel-rows="blocks=0" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not meshfold-opt %s -split-input-file --mf-linalg-parallel-rows="min-elements=-1" 2>&1 | FileCheck %s --check-prefix=NEGATIVE

// BAD: error: mf-linalg-parallel-rows: blocks=0 must be at least 1
// NEGATIVE: error: mf-linalg-parallel-rows: min-elements=-1 must not be negative

// With min-elements, the blocks run only for rows x 2816 >= 8192 elements;
// fewer (a decode step's row) take the op whole, on the calling thread.
// SMALL-LABEL: func.func @silu
// SMALL: %[[ROWS:.*]] = memref.dim %arg0, %c0
// SMALL: %[[N:.*]] = arith.muli %{{.*}}, %[[ROWS]]
// SMALL: %[[ALL:.*]] = arith.muli %[[N]], %c2816
// SMALL: %[[ENOUGH:.*]] = arith.cmpi uge, %[[ALL]], %c8192
// SMALL: scf.if %[[ENOUGH]] {
// SMALL: scf.parallel
// SMALL: linalg.generic {{.*}} outs(%{{.*}} : memref<?x2816xf32, strided<[2816, 1], offset: ?>>)
// SMALL: } else {
// SMALL-NEXT: linalg.generic {{.*}} outs(%arg1 : memref<?x2816xf32>)

// An elementwise op (the experts' SiLU): dim 0 in 8 blocks of ceil(rows / 8)
// rows, at least 1; dim 1 stays whole inside each block.
// CHECK: #[[$BLOCK:.*]] = affine_map<()[s0] -> (s0 ceildiv 8)>
// CHECK-LABEL: func.func @silu
// CHECK: %[[ROWS:.*]] = memref.dim %arg0, %c0
// CHECK: %[[B:.*]] = affine.apply #[[$BLOCK]]()[%[[ROWS]]]
// CHECK: %[[STEP:.*]] = arith.maxui %[[B]], %c1
// CHECK: scf.parallel (%[[I:.*]]) = (%c0{{.*}}) to (%{{.*}}) step (%[[STEP]])
// CHECK: memref.subview %arg0[%[[I]], 0] [%{{.*}}, 2816] [1, 1]
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : memref<?x2816xf32, strided<[2816, 1], offset: ?>>) outs(%{{.*}} : memref<?x2816xf32, strided<[2816, 1], offset: ?>>)
// CHECK: math.exp
func.func @silu(%g: memref<?x2816xf32>, %u: memref<?x2816xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      ins(%g : memref<?x2816xf32>) outs(%u : memref<?x2816xf32>) {
  ^bb0(%x: f32, %y: f32):
    %n = arith.negf %x : f32
    %e = math.exp %n : f32
    %one = arith.constant 1.0 : f32
    %d = arith.addf %e, %one : f32
    %s = arith.divf %x, %d : f32
    %r = arith.mulf %s, %y : f32
    linalg.yield %r : f32
  }
  return
}

// -----

// A gather whose body reads by index: linalg.index 0 becomes the block's
// offset plus the index within the block.
// CHECK-LABEL: func.func @gather
// CHECK: scf.parallel (%[[I:.*]]) =
// CHECK: linalg.generic
// CHECK: %[[LOCAL:.*]] = linalg.index 0
// CHECK: affine.apply #{{.*}}(%[[I]])[%[[LOCAL]]]
func.func @gather(%ids: memref<?xindex>, %x: memref<?x64xf32>, %y: memref<?x64xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      outs(%y : memref<?x64xf32>) {
  ^bb0(%o: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %t = memref.load %ids[%i] : memref<?xindex>
    %v = memref.load %x[%t, %j] : memref<?x64xf32>
    linalg.yield %v : f32
  }
  return
}

// -----

// Left alone: dim 0 a reduction; an output that dim 0 does not index (its
// rows would race); an op inside a parallel loop; tensors.
// CHECK-LABEL: func.func @left_alone
// CHECK-COUNT-2: linalg.generic
// CHECK: scf.parallel
// CHECK-NOT: scf.parallel
// CHECK: linalg.fill
// CHECK: linalg.generic
// CHECK: } -> tensor<8xf32>
func.func @left_alone(%a: memref<?x8xf32>, %s: memref<8xf32>, %t: tensor<8xf32>) -> tensor<8xf32> {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]}
      ins(%a : memref<?x8xf32>) outs(%s : memref<8xf32>) {
  ^bb0(%x: f32, %y: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<?x8xf32>) outs(%s : memref<8xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  }
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%c4) step (%c1) {
    linalg.fill ins(%zero : f32) outs(%s : memref<8xf32>)
    scf.reduce
  }
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      outs(%t : tensor<8xf32>) {
  ^bb0(%y: f32):
    %n = arith.negf %y : f32
    linalg.yield %n : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}
