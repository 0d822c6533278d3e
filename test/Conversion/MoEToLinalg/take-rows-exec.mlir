// REQUIRES: mlir-runner
// RUN: meshfold-opt %s --convert-moe-to-linalg \
// RUN:   --one-shot-bufferize="bufferize-function-boundaries" \
// RUN:   --convert-linalg-to-loops --lower-affine --convert-scf-to-cf \
// RUN:   --expand-strided-metadata --lower-affine --finalize-memref-to-llvm \
// RUN:   --convert-arith-to-llvm --convert-func-to-llvm --convert-cf-to-llvm \
// RUN:   --reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils \
// RUN: | FileCheck %s

// moe.take_rows, run: rows 2, 0, 2 of a [4, 2, 3] tensor (a row taken twice,
// one not taken) and of its i64 positions; no row at all gives [0, 2, 3].
// CHECK: rank = 3 offset = 0 sizes = [3, 2, 3] strides = [6, 3, 1] data =
// CHECK-NEXT: {{^}}{{\[\[\[}}20,{{ +}}21,{{ +}}22],
// CHECK-NEXT: {{^}}  [23,{{ +}}24,{{ +}}25]],
// CHECK-NEXT: {{^}} {{\[\[}}0,{{ +}}1,{{ +}}2],
// CHECK-NEXT: {{^}}  [3,{{ +}}4,{{ +}}5]],
// CHECK-NEXT: {{^}} {{\[\[}}20,{{ +}}21,{{ +}}22],
// CHECK-NEXT: {{^}}  [23,{{ +}}24,{{ +}}25]]]
// CHECK: rank = 1 offset = 0 sizes = [3] strides = [1] data =
// CHECK-NEXT: [7,{{ +}}5,{{ +}}7]
// CHECK: rank = 3 offset = 0 sizes = [0, 2, 3] strides = [6, 3, 1] data =

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}

func.func @printRows(%t: tensor<?x2x3xf32>) {
  %m = bufferization.to_buffer %t : tensor<?x2x3xf32> to memref<?x2x3xf32>
  %u = memref.cast %m : memref<?x2x3xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %x = arith.constant dense<[[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]],
                             [[10.0, 11.0, 12.0], [13.0, 14.0, 15.0]],
                             [[20.0, 21.0, 22.0], [23.0, 24.0, 25.0]],
                             [[30.0, 31.0, 32.0], [33.0, 34.0, 35.0]]]> : tensor<4x2x3xf32>
  %pos = arith.constant dense<[5, 6, 7, 8]> : tensor<4xi64>
  %picks = arith.constant dense<[2, 0, 2]> : tensor<3xi64>
  %rows = tensor.cast %picks : tensor<3xi64> to tensor<?xi64>
  %taken = moe.take_rows %x, %rows : tensor<4x2x3xf32>, tensor<?xi64> -> tensor<?x2x3xf32>
  call @printRows(%taken) : (tensor<?x2x3xf32>) -> ()
  %tp = moe.take_rows %pos, %rows : tensor<4xi64>, tensor<?xi64> -> tensor<?xi64>
  %pm = bufferization.to_buffer %tp : tensor<?xi64> to memref<?xi64>
  %pu = memref.cast %pm : memref<?xi64> to memref<*xi64>
  call @printMemrefI64(%pu) : (memref<*xi64>) -> ()
  %none = tensor.empty() : tensor<0xi64>
  %noRows = tensor.cast %none : tensor<0xi64> to tensor<?xi64>
  %empty = moe.take_rows %x, %noRows : tensor<4x2x3xf32>, tensor<?xi64> -> tensor<?x2x3xf32>
  call @printRows(%empty) : (tensor<?x2x3xf32>) -> ()
  return
}
