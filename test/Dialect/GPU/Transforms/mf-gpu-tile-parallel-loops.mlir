// RUN: meshfold-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mf-gpu-tile-parallel-loops{threads-per-block=256}))" | FileCheck %s
// RUN: not meshfold-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mf-gpu-tile-parallel-loops{threads-per-block=100}))" 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: error: threads-per-block must be a power of two in [1, 1024], got 100

// Threads go to the innermost dim first (64 of a static 64), the rest (4)
// to the dynamic one; the inner loop has constant bounds and an in-bounds
// check; the reduction loop stays inside, sequential. The dynamic dim may
// be empty (a rank without tokens): the loop is skipped then.
// CHECK-LABEL: func.func @matmul_like
// CHECK:         %[[T:.+]] = memref.dim
// CHECK:         %[[NONEMPTY:.+]] = arith.cmpi slt, %{{.*}}, %[[T]] : index
// CHECK:         scf.if %[[NONEMPTY]] {
// CHECK:         %[[C4:.+]] = arith.constant 4 : index
// CHECK:         %[[C64:.+]] = arith.constant 64 : index
// CHECK:         %[[S0:.+]] = arith.muli %{{.*}}, %[[C4]] : index
// CHECK:         %[[S1:.+]] = arith.muli %{{.*}}, %[[C64]] : index
// CHECK:         scf.parallel (%[[BI:.+]], %{{.*}}) = ({{.*}}) to (%[[T]], %{{.*}}) step (%[[S0]], %[[S1]])
// CHECK:           scf.parallel (%[[TI:.+]], %{{.*}}) = ({{.*}}) to (%[[S0]], %[[S1]]) step
// CHECK:             %[[I:.+]] = arith.addi %[[TI]], %[[BI]]
// CHECK:             arith.cmpi ult, %{{.*}}, %[[T]]
// CHECK:             scf.if
// CHECK:               scf.for
// CHECK:                 memref.store %{{.*}}, %arg2[%[[I]], %{{.*}}]
func.func @matmul_like(%x: memref<?x32xf32>, %w: memref<64x32xf32>, %y: memref<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %t = memref.dim %x, %c0 : memref<?x32xf32>
  scf.parallel (%i, %j) = (%c0, %c0) to (%t, %c64) step (%c1, %c1) {
    scf.for %k = %c0 to %c32 step %c1 {
      %a = memref.load %x[%i, %k] : memref<?x32xf32>
      %b = memref.load %w[%j, %k] : memref<64x32xf32>
      %acc = memref.load %y[%i, %j] : memref<?x64xf32>
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %m : f32
      memref.store %s, %y[%i, %j] : memref<?x64xf32>
    }
  }
  return
}

// -----

// A copy becomes a parallel loop (then tiled); a sequential nest that
// writes memory (a pure reduction) is wrapped in a one-iteration parallel
// loop so that it runs on the device too.
// CHECK-LABEL: func.func @copy_and_reduction
// CHECK-NOT:     memref.copy
// CHECK:         scf.parallel
// CHECK:           scf.parallel
// CHECK:             memref.load %arg0
// CHECK:             memref.store %{{.*}}, %arg1
// CHECK:         scf.parallel (%{{.*}}) = (%c0{{[_0-9]*}}) to (%c1{{[_0-9]*}}) step
// CHECK:           scf.parallel
// CHECK:             scf.for
// CHECK:               memref.store %{{.*}}, %arg2[]
func.func @copy_and_reduction(%a: memref<?xf32>, %b: memref<?xf32>, %r: memref<f32>) {
  memref.copy %a, %b : memref<?xf32> to memref<?xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf32>
  scf.for %i = %c0 to %n step %c1 {
    %v = memref.load %a[%i] : memref<?xf32>
    %acc = memref.load %r[] : memref<f32>
    %s = arith.addf %acc, %v : f32
    memref.store %s, %r[] : memref<f32>
  }
  return
}

// -----

// A sequential loop with a result nobody uses (a prefix sum that writes
// every partial sum and carries the running one) runs on the device too; one
// whose result the host reads stays where it is.
// CHECK-LABEL: func.func @prefix_sums
// CHECK:         scf.parallel (%{{.*}}) = (%c0{{[_0-9]*}}) to (%c1{{[_0-9]*}}) step
// CHECK:           scf.parallel
// CHECK:             scf.for {{.*}} iter_args
// CHECK:               memref.store %{{.*}}, %arg1[
// CHECK:         %[[TOTAL:.+]] = scf.for {{.*}} iter_args
// CHECK-NEXT:      memref.load %arg0
// CHECK:         return %[[TOTAL]]
func.func @prefix_sums(%counts: memref<8xindex>, %starts: memref<8xindex>) -> index {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %unused = scf.for %e = %c0 to %c8 step %c1 iter_args(%run = %c0) -> (index) {
    memref.store %run, %starts[%e] : memref<8xindex>
    %c = memref.load %counts[%e] : memref<8xindex>
    %next = arith.addi %run, %c : index
    scf.yield %next : index
  }
  %total = scf.for %e = %c0 to %c8 step %c1 iter_args(%run = %c0) -> (index) {
    %c = memref.load %counts[%e] : memref<8xindex>
    memref.store %run, %starts[%e] : memref<8xindex>
    %next = arith.addi %run, %c : index
    scf.yield %next : index
  }
  return %total : index
}
