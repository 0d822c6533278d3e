// RUN: meshfold-opt %s --mf-fills-at-use | FileCheck %s
// RUN: meshfold-opt %s --mf-fills-at-use --one-shot-bufferize="bufferize-function-boundaries" | FileCheck %s --check-prefix=BUF
// RUN: meshfold-opt %s --one-shot-bufferize="bufferize-function-boundaries" | FileCheck %s --check-prefix=MERGED

// -mf-fills-at-use: a zero fill that CSE shared between the k and v
// projections and a loop's carried tensor becomes one tensor.empty and fill
// right before each op that writes it; the reads of the fill (%z as an
// input of the adds) keep the original.

// CHECK-LABEL: func.func @projections(
// CHECK-SAME:      %[[H:[^:]+]]: tensor<?x64xf32>
// CHECK:           %[[ZERO:.+]] = arith.constant 0.0
// CHECK:           %[[T:.+]] = tensor.dim %[[H]]
// CHECK-NEXT:      %[[E:.+]] = tensor.empty(%[[T]]) : tensor<?x32xf32>
// CHECK-NEXT:      %[[Z:.+]] = linalg.fill ins(%[[ZERO]] : f32) outs(%[[E]] :
// CHECK-NEXT:      %[[E0:.+]] = tensor.empty(%[[T]]) : tensor<?x32xf32>
// CHECK-NEXT:      %[[Z0:.+]] = linalg.fill ins(%[[ZERO]] : f32) outs(%[[E0]] :
// CHECK-NEXT:      %[[K:.+]] = linalg.matmul ins(%[[H]], %{{.+}} : {{.*}}) outs(%[[Z0]] :
// CHECK-NEXT:      %[[E1:.+]] = tensor.empty(%[[T]]) : tensor<?x32xf32>
// CHECK-NEXT:      %[[Z1:.+]] = linalg.fill ins(%[[ZERO]] : f32) outs(%[[E1]] :
// CHECK-NEXT:      %[[V:.+]] = linalg.matmul ins(%[[H]], %{{.+}} : {{.*}}) outs(%[[Z1]] :
// CHECK-NEXT:      %[[E2:.+]] = tensor.empty(%[[T]]) : tensor<?x32xf32>
// CHECK-NEXT:      %[[Z2:.+]] = linalg.fill ins(%[[ZERO]] : f32) outs(%[[E2]] :
// CHECK-NEXT:      %[[S:.+]] = scf.for {{.*}} iter_args(%{{.+}} = %[[Z2]])
// CHECK:           linalg.add ins(%[[K]], %[[Z]] : {{.*}}) outs(%[[V]] :
// CHECK-NEXT:      linalg.add ins(%[[S]], %[[Z]] : {{.*}}) outs(%[[S]] :
// CHECK-NOT:       linalg.fill
// With the pass each op writes its own buffer, filled in place: no copies.
// BUF-LABEL: func.func @projections(
// BUF-NOT:       memref.copy
// BUF:           return
// Without it one filled buffer is copied for each op that writes it.
// MERGED-LABEL: func.func @projections(
// MERGED-COUNT-3: memref.copy
func.func @projections(%h: tensor<?x64xf32>, %wk: tensor<64x32xf32>,
                       %wv: tensor<64x32xf32>, %n: index)
    -> (tensor<?x32xf32>, tensor<?x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %h, %c0 : tensor<?x64xf32>
  %e = tensor.empty(%t) : tensor<?x32xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<?x32xf32>) -> tensor<?x32xf32>
  %k = linalg.matmul ins(%h, %wk : tensor<?x64xf32>, tensor<64x32xf32>) outs(%z : tensor<?x32xf32>) -> tensor<?x32xf32>
  %v = linalg.matmul ins(%h, %wv : tensor<?x64xf32>, tensor<64x32xf32>) outs(%z : tensor<?x32xf32>) -> tensor<?x32xf32>
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %z) -> (tensor<?x32xf32>) {
    %a = linalg.add ins(%acc, %k : tensor<?x32xf32>, tensor<?x32xf32>) outs(%acc : tensor<?x32xf32>) -> tensor<?x32xf32>
    scf.yield %a : tensor<?x32xf32>
  }
  %r = linalg.add ins(%k, %z : tensor<?x32xf32>, tensor<?x32xf32>) outs(%v : tensor<?x32xf32>) -> tensor<?x32xf32>
  %o = linalg.add ins(%s, %z : tensor<?x32xf32>, tensor<?x32xf32>) outs(%s : tensor<?x32xf32>) -> tensor<?x32xf32>
  return %r, %o : tensor<?x32xf32>, tensor<?x32xf32>
}

// A fill into a tensor that is not a tensor.empty (here an argument) stays,
// however many ops write it.
// CHECK-LABEL: func.func @single(
// CHECK-COUNT-1: linalg.fill
// CHECK-NOT:     linalg.fill
// CHECK-NOT:     tensor.empty
func.func @single(%a: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %zero = arith.constant 0.0 : f32
  %z = linalg.fill ins(%zero : f32) outs(%a : tensor<8xf32>) -> tensor<8xf32>
  %x = linalg.add ins(%z, %z : tensor<8xf32>, tensor<8xf32>) outs(%z : tensor<8xf32>) -> tensor<8xf32>
  return %x, %z : tensor<8xf32>, tensor<8xf32>
}
