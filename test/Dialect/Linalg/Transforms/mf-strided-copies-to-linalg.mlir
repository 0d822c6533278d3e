// RUN: meshfold-opt %s --pass-pipeline="builtin.module(func.func(mf-strided-copies-to-linalg))" | FileCheck %s

// A copy into a strided view (a tensor.concat's part, bufferized) becomes a
// linalg.copy, not a call of the runner library's memrefCopy; a copy
// between contiguous buffers stays a memref.copy (a memcpy).
// CHECK-LABEL: func.func @copies(
// CHECK-SAME:      %[[A:[^:]+]]: memref<?x8x32xf32>, %[[B:[^:]+]]: memref<?x8x40xf32>, %[[C:[^:]+]]: memref<?x8x32xf32>)
// CHECK:         %[[V:.+]] = memref.subview %[[B]]
// CHECK-NEXT:    linalg.copy ins(%[[A]] : memref<?x8x32xf32>) outs(%[[V]] : memref<?x8x32xf32, strided<[320, 40, 1]>>)
// CHECK-NEXT:    memref.copy %[[A]], %[[C]] : memref<?x8x32xf32> to memref<?x8x32xf32>
// CHECK-NOT:     memref.copy
func.func @copies(%a: memref<?x8x32xf32>, %b: memref<?x8x40xf32>, %c: memref<?x8x32xf32>) {
  %c0 = arith.constant 0 : index
  %t = memref.dim %a, %c0 : memref<?x8x32xf32>
  %v = memref.subview %b[0, 0, 0] [%t, 8, 32] [1, 1, 1] : memref<?x8x40xf32> to memref<?x8x32xf32, strided<[320, 40, 1]>>
  memref.copy %a, %v : memref<?x8x32xf32> to memref<?x8x32xf32, strided<[320, 40, 1]>>
  memref.copy %a, %c : memref<?x8x32xf32> to memref<?x8x32xf32>
  return
}
