// RUN: meshfold-opt %s --mf-buffer-reads-at-use | FileCheck %s
// RUN: meshfold-opt %s --mf-buffer-reads-at-use --one-shot-bufferize="bufferize-function-boundaries" | FileCheck %s --check-prefix=BUF

// -mf-buffer-reads-at-use: a read of a tensor by runtime calls, merged into
// one by CSE, becomes one read (to_buffer and its casts) right before each
// call. Bufferization then keeps the tensor's buffer until the last call:
// the fill in between (the same shape and type) writes a new buffer, not
// the one the last call reads.

func.func private @first(memref<*xi64>)
func.func private @last(memref<*xi64>)

// CHECK-LABEL: func.func @positions(
// CHECK-SAME:      %[[POS:.+]]: tensor<?xi64>
// CHECK-NEXT:      %[[B0:.+]] = bufferization.to_buffer %[[POS]] read_only
// CHECK-NEXT:      %[[C0:.+]] = memref.cast %[[B0]] : {{.*}} to memref<*xi64>
// CHECK-NEXT:      call @first(%[[C0]])
// CHECK:           linalg.fill
// CHECK-NEXT:      %[[B1:.+]] = bufferization.to_buffer %[[POS]] read_only
// CHECK-NEXT:      %[[C1:.+]] = memref.cast %[[B1]] : {{.*}} to memref<*xi64>
// CHECK-NEXT:      call @last(%[[C1]])
// CHECK-NOT:       bufferization.to_buffer
// Without the pass the fill writes %pos's own buffer before @last reads it.
// BUF-LABEL: func.func @positions(
// BUF-SAME:      %[[ARG:.+]]: memref<?xi64
// BUF:           %[[NEW:.+]] = memref.alloc
// BUF:           linalg.fill ins(%{{.+}} : i64) outs(%[[NEW]] :
// BUF:           %[[C:.+]] = memref.cast %[[ARG]]
// BUF-NEXT:      call @last(%[[C]])
func.func @positions(%pos: tensor<?xi64>) -> tensor<?xi64> {
  %b = bufferization.to_buffer %pos read_only : tensor<?xi64> to memref<?xi64, strided<[?], offset: ?>>
  %c = memref.cast %b : memref<?xi64, strided<[?], offset: ?>> to memref<*xi64>
  call @first(%c) : (memref<*xi64>) -> ()
  %m1 = arith.constant -1 : i64
  %ids = linalg.fill ins(%m1 : i64) outs(%pos : tensor<?xi64>) -> tensor<?xi64>
  call @last(%c) : (memref<*xi64>) -> ()
  return %ids : tensor<?xi64>
}
