// RUN: meshfold-opt %s --convert-mf-to-llvm | FileCheck %s

// mf.weight becomes a call to mfrt_weight(id) and a static-shape descriptor.
// CHECK: llvm.func @mfrt_weight(i64) -> !llvm.ptr
// CHECK-LABEL: func.func @weights
// CHECK: %[[ID:.+]] = llvm.mlir.constant(7 : i64) : i64
// CHECK: %[[P:.+]] = llvm.call @mfrt_weight(%[[ID]]) : (i64) -> !llvm.ptr
// CHECK: llvm.insertvalue %[[P]], %{{.+}}[0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
// CHECK: llvm.insertvalue %[[P]], %{{.+}}[1]
// CHECK: llvm.mlir.constant(8 : index)
// CHECK-NOT: mf.weight
func.func @weights() -> memref<4x8xf32> {
  %w = mf.weight 7, "model.layers.0.self_attn.q_proj.weight" : memref<4x8xf32>
  return %w : memref<4x8xf32>
}
