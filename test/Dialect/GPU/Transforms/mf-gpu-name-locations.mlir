// RUN: meshfold-opt %s --mf-gpu-name-locations --mlir-print-debuginfo | FileCheck %s

// moe ops and ops with tensor results get a NameLoc of their op name around
// their location; the scalar constant and the return keep theirs.
// CHECK-LABEL: func.func @f
// CHECK:         moe.rms_norm {{.*}} loc(#[[NORM:loc[0-9]+]])
// CHECK:         arith.addf {{.*}} loc(#[[ADD:loc[0-9]+]])
// CHECK:         arith.constant 1 : index loc(#[[CST:loc[0-9]+]])
// CHECK-DAG:   #[[NORM]] = loc("moe.rms_norm"(#{{loc[0-9]*}}))
// CHECK-DAG:   #[[ADD]] = loc("arith.addf"(#{{loc[0-9]*}}))
// CHECK-DAG:   #[[CST]] = loc("{{.*}}":{{[0-9]+}}:{{[0-9]+}})
func.func @f(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %y = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %z = arith.addf %x, %y : tensor<4x8xf32>
  %c = arith.constant 1 : index
  return %z : tensor<4x8xf32>
}
