// RUN: meshfold-opt %s --convert-mf-to-llvm | FileCheck %s

// mf.weight becomes a call to mfrt_weight(id) and a static-shape descriptor.
// CHECK-DAG: llvm.func @mfrt_weight(i64) -> !llvm.ptr
// CHECK-DAG: llvm.func @mfrt_kv_rows_f32(i64, i64, i64, i64) -> !llvm.ptr
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

// mf.kv_rows becomes a call to mfrt_kv_rows_f32(layer, tensor, first KV
// head, KV heads) and a descriptor of [rows, heads, head_dim], contiguous.
// CHECK-LABEL: func.func @kv_rows
// CHECK-SAME: (%[[ROWS:.+]]: index, %[[FIRST:.+]]: i64)
// CHECK: %[[L:.+]] = llvm.mlir.constant(3 : i64) : i64
// CHECK: %[[T:.+]] = llvm.mlir.constant(1 : i64) : i64
// CHECK: %[[H:.+]] = llvm.mlir.constant(2 : i64) : i64
// CHECK: %[[P:.+]] = llvm.call @mfrt_kv_rows_f32(%[[L]], %[[T]], %[[FIRST]], %[[H]]) : (i64, i64, i64, i64) -> !llvm.ptr
// CHECK: llvm.insertvalue %[[P]], %{{.+}}[0] : !llvm.struct<(ptr, ptr, i64, array<3 x i64>, array<3 x i64>)>
// CHECK: llvm.insertvalue %[[P]], %{{.+}}[1]
// CHECK-NOT: mf.kv_rows
func.func @kv_rows(%rows: index, %first: i64) -> memref<?x2x64xf32> {
  %r = mf.kv_rows %rows, %first {layer = 3 : i64, tensor = 1 : i64} : memref<?x2x64xf32>
  return %r : memref<?x2x64xf32>
}
