// RUN: meshfold-opt %s --mf-sink-allocs | FileCheck %s

// -mf-sink-allocs: the attention's output buffer, allocated where its
// tensor.empty stood (before the rotary embedding), moves down to right
// before the loop that writes it, below the deallocation of the queries:
// the two are no longer live at once.

// CHECK-LABEL: func.func @attention(
// CHECK-SAME:      %[[T:[^:]+]]: index
// CHECK:           %[[Q:.+]] = memref.alloc(%[[T]]) : memref<?x64xf32>
// CHECK-NEXT:      linalg.fill {{.*}} outs(%[[Q]] :
// CHECK-NEXT:      %[[R:.+]] = memref.alloc(%[[T]]) : memref<?x64xf32>
// CHECK-NEXT:      linalg.copy ins(%[[Q]] : {{.*}}) outs(%[[R]] :
// CHECK-NEXT:      memref.dealloc %[[Q]]
// CHECK-NEXT:      %[[OUT:.+]] = memref.alloc(%[[T]]) : memref<?x64xf32>
// CHECK-NEXT:      scf.forall
// CHECK:             memref.subview %[[OUT]]
// CHECK:           memref.dealloc %[[R]]
// CHECK-NEXT:      return %[[OUT]]
func.func @attention(%t: index) -> memref<?x64xf32> {
  %out = memref.alloc(%t) : memref<?x64xf32>
  %q = memref.alloc(%t) : memref<?x64xf32>
  %r = memref.alloc(%t) : memref<?x64xf32>
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%q : memref<?x64xf32>)
  linalg.copy ins(%q : memref<?x64xf32>) outs(%r : memref<?x64xf32>)
  memref.dealloc %q : memref<?x64xf32>
  scf.forall (%i) in (%t) {
    %row = memref.subview %out[%i, 0] [1, 64] [1, 1] : memref<?x64xf32> to memref<64xf32, strided<[1], offset: ?>>
    %src = memref.subview %r[%i, 0] [1, 64] [1, 1] : memref<?x64xf32> to memref<64xf32, strided<[1], offset: ?>>
    linalg.copy ins(%src : memref<64xf32, strided<[1], offset: ?>>) outs(%row : memref<64xf32, strided<[1], offset: ?>>)
  }
  memref.dealloc %r : memref<?x64xf32>
  return %out : memref<?x64xf32>
}

// A buffer allocated in a loop body moves within that body, below the call
// that does not use it; its size, computed above it, still dominates it.
// CHECK-LABEL: func.func @nested(
// CHECK:           scf.for
// CHECK-NEXT:        %[[N:.+]] = arith.addi
// CHECK-NEXT:        call @work
// CHECK-NEXT:        %[[B:.+]] = memref.alloc(%[[N]])
// CHECK-NEXT:        linalg.fill {{.*}} outs(%[[B]] :
// CHECK-NEXT:        memref.dealloc %[[B]]
func.func private @work()
func.func @nested(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  scf.for %i = %c0 to %n step %c1 {
    %m = arith.addi %i, %c1 : index
    %b = memref.alloc(%m) : memref<?xf32>
    func.call @work() : () -> ()
    linalg.fill ins(%zero : f32) outs(%b : memref<?xf32>)
    memref.dealloc %b : memref<?xf32>
  }
  return
}
