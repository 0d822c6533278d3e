// RUN: meshfold-opt %s --pass-pipeline="builtin.module(func.func(mf-gpu-scope-parallel-allocas))" | FileCheck %s

// A block loop with a buffer saves the stack at the start of its body and
// restores it at the end, inside any enclosing loop; a parallel loop
// without allocas, or with results, is left alone.
// CHECK-LABEL: func.func @block_buffer
// CHECK:         scf.for
// CHECK-NEXT:      scf.parallel
// CHECK-NEXT:        %[[SP:.+]] = llvm.intr.stacksave : !llvm.ptr
// CHECK-NEXT:        %[[S:.+]] = memref.alloca() : memref<16x64xf32>
// CHECK-NEXT:        scf.parallel
// CHECK-NOT:           llvm.intr.stacksave
// CHECK:               memref.load %[[S]]
// CHECK:             }
// CHECK-NEXT:        llvm.intr.stackrestore %[[SP]] : !llvm.ptr
// CHECK-NEXT:        scf.reduce
// CHECK:         scf.parallel
// CHECK-NOT:       llvm.intr.stacksave
// CHECK:           scf.reduce(
func.func @block_buffer(%n: index, %o: memref<?xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  scf.for %e = %c0 to %n step %c1 {
    scf.parallel (%b) = (%c0) to (%n) step (%c1) {
      %s = memref.alloca() : memref<16x64xf32>
      scf.parallel (%t) = (%c0) to (%n) step (%c1) {
        %v = memref.load %s[%c0, %c0] : memref<16x64xf32>
        memref.store %v, %o[%t] : memref<?xf32>
      }
    }
  }
  %sum = scf.parallel (%i) = (%c0) to (%n) step (%c1) init (%zero) -> f32 {
    %v = memref.load %o[%i] : memref<?xf32>
    scf.reduce(%v : f32) {
    ^bb0(%x: f32, %y: f32):
      %r = arith.addf %x, %y : f32
      scf.reduce.return %r : f32
    }
  }
  return %sum : f32
}
