// RUN: meshfold-opt %s -split-input-file --mf-fuse-collectives | FileCheck %s

// An all-reduce sliced along a static dim becomes a reduce-scatter whose
// result, and the per-token ops after it, have the slice's (local) type.
// CHECK-LABEL: func.func @static_rs
// CHECK-SAME: (%[[P:.+]]: tensor<8x64xf32>, %[[H:.+]]: tensor<8x64xf32>) -> tensor<4x64xf32>
// CHECK: %[[RS:.+]] = mf.reduce_scatter %[[P]] on "attention" ["tp"] dim 0 : tensor<8x64xf32> -> tensor<4x64xf32>
// CHECK: %[[HS:.+]] = mf.slice %[[H]] on "attention" ["tp"] dim 0 : tensor<8x64xf32> -> tensor<4x64xf32>
// CHECK: %[[SUM:.+]] = arith.addf %[[HS]], %[[RS]] : tensor<4x64xf32>
// CHECK: return %[[SUM]] : tensor<4x64xf32>
// CHECK-NOT: mf.all_reduce
module attributes {mf.plan = #mf.plan<devices = 32, gpus_per_node = 8,
    attention = [tp = 2, cp = 2, dp = 4, pp = 2],
    experts = [ep = 16 : (tp, cp, dp), pp = 2 : (pp)]>} {
  func.func @static_rs(%p: tensor<8x64xf32>, %h: tensor<8x64xf32>) -> tensor<4x64xf32> {
    %s = mf.all_reduce %p on "attention" ["tp"] : tensor<8x64xf32> -> tensor<8x64xf32>
    %a = arith.addf %h, %s : tensor<8x64xf32>
    %m = mf.slice %a on "attention" ["tp"] dim 0 : tensor<8x64xf32> -> tensor<4x64xf32>
    return %m : tensor<4x64xf32>
  }

  // The same along a static dim 1 of a tensor with dynamic rows.
  // CHECK-LABEL: func.func @static_dim1
  // CHECK: mf.reduce_scatter %{{.+}} on "attention" ["tp"] dim 1 : tensor<?x64xf32> -> tensor<?x32xf32>
  func.func @static_dim1(%p: tensor<?x64xf32>) -> tensor<?x32xf32> {
    %s = mf.all_reduce %p on "attention" ["tp"] : tensor<?x64xf32> -> tensor<?x64xf32>
    %m = mf.slice %s on "attention" ["tp"] dim 1 : tensor<?x64xf32> -> tensor<?x32xf32>
    return %m : tensor<?x32xf32>
  }
}

// -----

// An all-reduce that depends on another through a region (the generic reads
// %a inside its body) is not grouped with it.
#map = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @captured
// CHECK: %[[A:.+]] = mf.all_reduce %{{.+}} on "attention" ["tp"] : tensor<4x64xf32> -> tensor<4x64xf32>
// CHECK: %[[G:.+]] = linalg.generic
// CHECK: tensor.extract %[[A]]
// CHECK: mf.all_reduce %[[G]] on "attention" ["tp"] : tensor<4x64xf32> -> tensor<4x64xf32>
func.func @captured(%x: tensor<4x64xf32>, %y: tensor<4x64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  %c0 = arith.constant 0 : index
  %a = mf.all_reduce %x on "attention" ["tp"] : tensor<4x64xf32> -> tensor<4x64xf32>
  %g = linalg.generic {indexing_maps = [#map], iterator_types = ["parallel", "parallel"]} outs(%y : tensor<4x64xf32>) {
  ^bb0(%o: f32):
    %e = tensor.extract %a[%c0, %c0] : tensor<4x64xf32>
    linalg.yield %e : f32
  } -> tensor<4x64xf32>
  %b = mf.all_reduce %g on "attention" ["tp"] : tensor<4x64xf32> -> tensor<4x64xf32>
  return %a, %b : tensor<4x64xf32>, tensor<4x64xf32>
}
