// REQUIRES: mlir-runner
// RUN: meshfold-opt %s --convert-moe-to-linalg --convert-elementwise-to-linalg \
// RUN:   --one-shot-bufferize="bufferize-function-boundaries" \
// RUN:   --convert-linalg-to-loops --lower-affine --convert-scf-to-cf \
// RUN:   --expand-strided-metadata --lower-affine --finalize-memref-to-llvm \
// RUN:   --convert-math-to-llvm --convert-math-to-libm --convert-arith-to-llvm \
// RUN:   --convert-func-to-llvm --convert-cf-to-llvm --reconcile-unrealized-casts \
// RUN: | mlir-runner -e main -entry-point-result=void \
// RUN:   -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils \
// RUN: | FileCheck %s

// Ring attention's numerics, run: moe.attention over the keys [K1; K2] equals
// moe.attention_merge of moe.attention_partial over K1 and over K2, and the
// merged log-sum-exp equals the log-sum-exp over all keys. GQA (2 query heads
// on 1 KV head), scale 0.5. K1 holds positions 3, 4 and K2 positions 0, 1, so
// the queries at positions 0 and 2 see no key of K1 (their K1 rows are fully
// masked: output 0, lse -inf) and the query at 4 sees all four keys.
// The expected numbers are computed by hand (float64, 6 digits as printed).

// (a) moe.attention over [K1; K2].
// CHECK: rank = 3 offset = 0 sizes = [3, 2, 2] strides = [4, 2, 1] data =
// CHECK-NEXT: {{^}}[[O0:\[\[\[0.25, +-1\],]]
// CHECK-NEXT: {{^}}[[O1:  \[0.25, +-1\]\],]]
// CHECK-NEXT: {{^}}[[O2: \[\[0.74246, +0.407028\],]]
// CHECK-NEXT: {{^}}[[O3:  \[1.18397, +1.66849\]\],]]
// CHECK-NEXT: {{^}}[[O4: \[\[-0.592872, +1.23841\],]]
// CHECK-NEXT: {{^}}[[O5:  \[0.407499, +0.614567\]\]\]]]{{$}}

// (b) moe.attention_merge of the partials over K1 and K2: the same values.
// CHECK: rank = 3 offset = 0 sizes = [3, 2, 2] strides = [4, 2, 1] data =
// CHECK-NEXT: {{^}}[[O0]]
// CHECK-NEXT: {{^}}[[O1]]
// CHECK-NEXT: {{^}}[[O2]]
// CHECK-NEXT: {{^}}[[O3]]
// CHECK-NEXT: {{^}}[[O4]]
// CHECK-NEXT: {{^}}[[O5]]{{$}}

// The partial over K1 alone: rows of the queries at 0 and 2 are fully masked.
// CHECK: rank = 3 offset = 0 sizes = [3, 2, 2] strides = [4, 2, 1] data =
// CHECK-NEXT: {{^\[\[\[0, +0\],}}
// CHECK-NEXT: {{^  \[0, +0\]\],}}
// CHECK-NEXT: {{^ \[\[0, +0\],}}
// CHECK-NEXT: {{^  \[0, +0\]\],}}
// CHECK-NEXT: {{^ \[\[-1.92423, +0.903412\],}}
// CHECK-NEXT: {{^  \[-0.394581, +1.47703\]\]\]$}}
// CHECK: rank = 2 offset = 0 sizes = [3, 2] strides = [2, 1] data =
// CHECK-NEXT: {{^\[\[-inf, +-inf\],}}
// CHECK-NEXT: {{^ \[-inf, +-inf\],}}
// CHECK-NEXT: {{^ \[1.21326, +0.128701\]\]$}}

// The log-sum-exp over all keys (moe.attention_partial over [K1; K2]), then
// the merged one: the same values.
// CHECK: rank = 2 offset = 0 sizes = [3, 2] strides = [2, 1] data =
// CHECK-NEXT: {{^}}[[L0:\[\[-0.6, +-0.3375\],]]
// CHECK-NEXT: {{^}}[[L1: \[1.45546, +0.597924\],]]
// CHECK-NEXT: {{^}}[[L2: \[1.7709, +1.4393\]\]]]{{$}}
// CHECK: rank = 2 offset = 0 sizes = [3, 2] strides = [2, 1] data =
// CHECK-NEXT: {{^}}[[L0]]
// CHECK-NEXT: {{^}}[[L1]]
// CHECK-NEXT: {{^}}[[L2]]{{$}}

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @print3(%t: tensor<3x2x2xf32>) {
  %m = bufferization.to_buffer %t : tensor<3x2x2xf32> to memref<3x2x2xf32>
  %u = memref.cast %m : memref<3x2x2xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

func.func @print2(%t: tensor<3x2xf32>) {
  %m = bufferization.to_buffer %t : tensor<3x2xf32> to memref<3x2xf32>
  %u = memref.cast %m : memref<3x2xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  // Queries [Tq = 3, n_h = 2, d_h = 2] at positions 0, 2, 4.
  %q = arith.constant dense<[[[0.5, -1.0], [1.5, 0.25]], [[-0.75, 2.0], [0.1, -0.3]], [[1.0, 1.0], [-2.0, 0.5]]]> : tensor<3x2x2xf32>
  %qp = arith.constant dense<[0, 2, 4]> : tensor<3xi64>
  // K1, V1 at positions 3, 4; K2, V2 at positions 0, 1; K, V = [K1; K2].
  %k1 = arith.constant dense<[[[0.2, -0.4]], [[1.1, 0.7]]]> : tensor<2x1x2xf32>
  %v1 = arith.constant dense<[[[1.0, 2.0]], [[-3.0, 0.5]]]> : tensor<2x1x2xf32>
  %kp1 = arith.constant dense<[3, 4]> : tensor<2xi64>
  %k2 = arith.constant dense<[[[-0.6, 0.9]], [[0.3, 0.3]]]> : tensor<2x1x2xf32>
  %v2 = arith.constant dense<[[[0.25, -1.0]], [[2.0, 4.0]]]> : tensor<2x1x2xf32>
  %kp2 = arith.constant dense<[0, 1]> : tensor<2xi64>
  %k = arith.constant dense<[[[0.2, -0.4]], [[1.1, 0.7]], [[-0.6, 0.9]], [[0.3, 0.3]]]> : tensor<4x1x2xf32>
  %v = arith.constant dense<[[[1.0, 2.0]], [[-3.0, 0.5]], [[0.25, -1.0]], [[2.0, 4.0]]]> : tensor<4x1x2xf32>
  %kp = arith.constant dense<[3, 4, 0, 1]> : tensor<4xi64>

  %full = moe.attention %q, %k, %v, %qp, %kp {scale = 0.5 : f32} : tensor<3x2x2xf32>, tensor<4x1x2xf32>, tensor<4x1x2xf32>, tensor<3xi64>, tensor<4xi64> -> tensor<3x2x2xf32>
  %fo, %fl = moe.attention_partial %q, %k, %v, %qp, %kp {scale = 0.5 : f32} : tensor<3x2x2xf32>, tensor<4x1x2xf32>, tensor<4x1x2xf32>, tensor<3xi64>, tensor<4xi64> -> tensor<3x2x2xf32>, tensor<3x2xf32>
  %o1, %l1 = moe.attention_partial %q, %k1, %v1, %qp, %kp1 {scale = 0.5 : f32} : tensor<3x2x2xf32>, tensor<2x1x2xf32>, tensor<2x1x2xf32>, tensor<3xi64>, tensor<2xi64> -> tensor<3x2x2xf32>, tensor<3x2xf32>
  %o2, %l2 = moe.attention_partial %q, %k2, %v2, %qp, %kp2 {scale = 0.5 : f32} : tensor<3x2x2xf32>, tensor<2x1x2xf32>, tensor<2x1x2xf32>, tensor<3xi64>, tensor<2xi64> -> tensor<3x2x2xf32>, tensor<3x2xf32>
  %mo, %ml = moe.attention_merge %o1, %l1, %o2, %l2 : tensor<3x2x2xf32>, tensor<3x2xf32> -> tensor<3x2x2xf32>, tensor<3x2xf32>

  call @print3(%full) : (tensor<3x2x2xf32>) -> ()
  call @print3(%mo) : (tensor<3x2x2xf32>) -> ()
  call @print3(%o1) : (tensor<3x2x2xf32>) -> ()
  call @print2(%l1) : (tensor<3x2xf32>) -> ()
  call @print2(%fl) : (tensor<3x2xf32>) -> ()
  call @print2(%ml) : (tensor<3x2xf32>) -> ()
  return
}
