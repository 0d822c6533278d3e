// RUN: meshfold-opt %s -split-input-file --convert-mf-to-runtime | FileCheck %s

// -convert-mf-to-runtime cuts an mf.slice with one tensor.extract_slice whose
// sizes are static exactly where the result's dims are (the op infers its
// type from them): a static result keeps static sizes, and a dynamic dim
// past the first takes the input's size. The common case, a dynamic first
// dim and static others, is in convert-mf-to-runtime.mlir.

// A static input: 4 of the 8 rows, at the TP rank times the row count.
// CHECK-LABEL:   func.func @static_rows(
// CHECK-SAME:        %[[X:[^:]+]]: tensor<8x8xf32>)
// CHECK:           %[[R:.+]] = call @mfrt_cg_group_rank(%{{.+}}) : (i64) -> i64
// CHECK-NEXT:      %[[RI:.+]] = arith.index_cast %[[R]] : i64 to index
// CHECK-NEXT:      %[[C0:.+]] = arith.constant 0 : index
// CHECK-NEXT:      %[[T:.+]] = tensor.dim %[[X]], %[[C0]] : tensor<8x8xf32>
// CHECK-NEXT:      %[[C2:.+]] = arith.constant 2 : index
// CHECK-NEXT:      %[[ROWS:.+]] = arith.divui %[[T]], %[[C2]] : index
// CHECK-NEXT:      %[[OFF:.+]] = arith.muli %[[RI]], %[[ROWS]] : index
// CHECK-NEXT:      %[[S:.+]] = tensor.extract_slice %[[X]][%[[OFF]], 0] [4, 8] [1, 1] : tensor<8x8xf32> to tensor<4x8xf32>
// CHECK-NEXT:      return %[[S]]
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @static_rows(%x: tensor<8x8xf32>) -> tensor<4x8xf32> {
    %0 = mf.slice %x on "attention" ["tp"] dim 0 : tensor<8x8xf32> -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// -----

// Dynamic dims past the first keep the input's sizes.
// CHECK-LABEL:   func.func @dynamic_inner(
// CHECK-SAME:        %[[X:[^:]+]]: tensor<?x?x4xf32>)
// CHECK:           %[[ROWS:.+]] = arith.divui %{{.+}}, %{{.+}} : index
// CHECK-NEXT:      %[[OFF:.+]] = arith.muli %{{.+}}, %[[ROWS]] : index
// CHECK-NEXT:      %[[C1:.+]] = arith.constant 1 : index
// CHECK-NEXT:      %[[D1:.+]] = tensor.dim %[[X]], %[[C1]] : tensor<?x?x4xf32>
// CHECK-NEXT:      %[[S:.+]] = tensor.extract_slice %[[X]][%[[OFF]], 0, 0] [%[[ROWS]], %[[D1]], 4] [1, 1, 1] : tensor<?x?x4xf32> to tensor<?x?x4xf32>
// CHECK-NEXT:      return %[[S]]
module attributes {mf.plan = #mf.plan<devices = 2, gpus_per_node = 8,
    attention = [tp = 2], experts = [ep = 2 : (tp)]>} {
  func.func @dynamic_inner(%x: tensor<?x?x4xf32>) -> tensor<?x?x4xf32> {
    %0 = mf.slice %x on "attention" ["tp"] dim 0 : tensor<?x?x4xf32> -> tensor<?x?x4xf32>
    return %0 : tensor<?x?x4xf32>
  }
}
