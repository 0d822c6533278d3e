// RUN: meshfold-opt %s --split-input-file --verify-diagnostics --pass-pipeline="builtin.module(func.func(mf-gpu-forall-to-phases{threads-per-block=64}))" | FileCheck %s

// A forall over (head, row tile) whose body fills a tile buffer sized
// min(32, rest), sums its rows into a running total carried by a loop, and
// copies the result out: the iterations become blocks of 64 threads; the
// buffer a block buffer of its largest size, viewed at its size; the fill,
// the row sums (a reduction, sequential per row) and the copy thread
// phases; the loop block code; the deallocation gone.
// CHECK-LABEL: func.func @tiles
// CHECK-NOT:     scf.forall
// CHECK:         scf.parallel (%[[H:.+]], %[[I0:.+]]) = ({{.+}}) to ({{.+}}) step ({{.+}}) {
// CHECK-NEXT:      %[[BUF:.+]] = memref.alloca() : memref<256xf32>
// CHECK-NEXT:      %[[SUMBUF:.+]] = memref.alloca() : memref<32xf32>
// CHECK:           %[[N:.+]] = arith.minsi
// CHECK:           %[[TILE:.+]] = memref.reinterpret_cast %[[BUF]] to offset: [0], sizes: [%[[N]], 8], strides: [8, 1] : memref<256xf32> to memref<?x8xf32>
// CHECK:           %[[SUMS:.+]] = memref.reinterpret_cast %[[SUMBUF]] to offset: [0], sizes: [%[[N]]], strides: [1] : memref<32xf32> to memref<?xf32>
// CHECK:           scf.parallel (%[[T:.+]]) = (%{{.+}}) to (%c64{{.*}}) step
// CHECK:             scf.for %{{.+}} = %[[T]] to %{{.+}} step %c64
// CHECK:               memref.store %{{.+}}, %[[TILE]]
// CHECK:           } {mf.gpu_thread_phase}
// CHECK:           %[[R:.+]] = scf.for %{{.+}} = %{{.+}} to %{{.+}} step %{{.+}} iter_args(%[[ACC:.+]] = %[[SUMS]])
// CHECK:             scf.parallel
// CHECK:               scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c64
// CHECK:                 scf.for {{.+}} iter_args
// CHECK:                   memref.load %[[TILE]]
// CHECK:                 memref.store %{{.+}}, %[[ACC]]
// CHECK:             } {mf.gpu_thread_phase}
// CHECK:           %[[DST:.+]] = memref.subview %arg1
// CHECK:           scf.parallel
// CHECK:             memref.load %[[R]]
// CHECK:             memref.store %{{.+}}, %[[DST]]
// CHECK:           } {mf.gpu_thread_phase}
// CHECK-NOT:       memref.dealloc
// CHECK:         } {mf.gpu_phases = 64 : i64}
func.func @tiles(%x: memref<?x8xf32>, %out: memref<4x?xf32>, %t: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c32 = arith.constant 32 : index
  %one = arith.constant 1.0 : f32
  scf.forall (%h, %i0) = (0, 0) to (4, %t) step (1, 32) {
    %rest = arith.subi %t, %i0 : index
    %n = arith.minsi %c32, %rest : index
    %tile = memref.alloc(%n) : memref<?x8xf32>
    %sums = memref.alloc(%n) : memref<?xf32>
    linalg.fill ins(%one : f32) outs(%tile : memref<?x8xf32>)
    %r = scf.for %k = %c0 to %c2 step %c1 iter_args(%acc = %sums) -> (memref<?xf32>) {
      linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types = ["parallel", "reduction"]}
          ins(%tile : memref<?x8xf32>) outs(%acc : memref<?xf32>) {
      ^bb0(%a: f32, %s: f32):
        %y = arith.addf %a, %s : f32
        linalg.yield %y : f32
      }
      scf.yield %acc : memref<?xf32>
    }
    %dst = memref.subview %out[%h, %i0] [1, %n] [1, 1] : memref<4x?xf32> to memref<?xf32, strided<[1], offset: ?>>
    memref.copy %r, %dst : memref<?xf32> to memref<?xf32, strided<[1], offset: ?>>
    memref.dealloc %tile : memref<?x8xf32>
  }
  return
}

// -----

// A tile buffer needs a constant bound for its size (shared memory is
// sized when the kernel is compiled).
func.func @unbounded(%out: memref<?xf32>, %t: index) {
  %one = arith.constant 1.0 : f32
  scf.forall (%i) in (4) {
    // expected-error @+1 {{a tile buffer's size needs a constant bound, such as min(TILE, rest)}}
    %tile = memref.alloc(%t) : memref<?xf32>
    linalg.fill ins(%one : f32) outs(%tile : memref<?xf32>)
  }
  return
}
